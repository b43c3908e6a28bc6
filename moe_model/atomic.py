"""Files the user keeps are written whole or not at all: a temporary file beside the target, then a rename.

A write cut short (a full disk, Ctrl-C, a crash) leaves the previous file as it was; the rename is atomic on
one file system (POSIX rename(2)), which is why the temporary file lives in the target's folder.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | Path, fill: Callable[[BinaryIO], None]) -> None:
    """`fill` writes the file's bytes to a temporary file beside `path`, which then replaces `path`."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        os.fchmod(fd, _mode_for(target))  # mkstemp makes it 0600: the file keeps the mode a plain write gives it
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(target)  # a failed write names no file: the one the user asked for
        raise


def _mode_for(target: Path) -> int:
    """The replaced file's permissions, or for a new one what open() would give it (0666 less the umask)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read where Linux shows it (setting it to read it would race other threads)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


def write_text_atomic(path: str | Path, text: str) -> None:
    """`text` (UTF-8) written to `path` whole or not at all."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
