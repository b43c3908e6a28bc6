"""Open local files for the readers: regular files only.

A device never ends (`/dev/zero` once grew a trace read to 7.5 GiB) and a FIFO blocks until someone
writes to it, so both are refused before a byte is read; so is a folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from moe_model.errors import MoeModelError


def open_regular(path: str | Path, what: str, error: type[MoeModelError]) -> BinaryIO:
    """`path` opened for binary reading if it is a regular file, else one line: `error`("no such {what}: ...")
    for a missing one, and a refusal naming the kind of file for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    except FileNotFoundError:
        raise error(f"no such {what}: {path}") from None
    except OSError as err:
        raise error(f"cannot open the {what} {path}: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode  # of what was opened: a name swapped after a check cannot slip through
        if not stat.S_ISREG(mode):
            raise error(f"{path} is {_kind(mode)}, not a regular file: only regular files are read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket or special file"
