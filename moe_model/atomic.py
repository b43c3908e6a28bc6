"""Files the user keeps are written whole or not at all: a temporary file beside the target, then a rename.

A write cut short (a full disk, Ctrl-C, a crash) leaves the previous file as it was; the rename is atomic on
one file system (POSIX rename(2)), which is why the temporary file lives in the target's folder.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | Path, fill: Callable[[BinaryIO], None]) -> None:
    """`fill` writes the file's bytes to a temporary file beside `path`, which then replaces `path`."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """`text` (UTF-8) written to `path` whole or not at all."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
