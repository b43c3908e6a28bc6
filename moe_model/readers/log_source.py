"""A llama.cpp log's text as bounded lines: from a path (a regular file under MAX_LOG_BYTES), bytes or a binary
stream; non-UTF-8 bytes replaced, never fatal; an overlong line cut and the rest read past, never held."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from moe_model.errors import LogError
from moe_model.limits import MAX_LOG_BYTES, MAX_LOG_LINE_CHARS
from moe_model.readers.files import open_regular


def log_lines(source: str | Path | bytes | BinaryIO) -> Iterator[str]:
    """Decoded lines, streamed; non-UTF-8 bytes are replaced, never fatal; a path must be a regular file."""
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    if isinstance(source, (str, Path)):
        f = open_regular(source, "log file", LogError)
        with io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="") as text:  # closes f too
            if os.fstat(f.fileno()).st_size > MAX_LOG_BYTES:
                raise LogError(f"{Path(source).name} is larger than {MAX_LOG_BYTES // 1024**3} GiB")
            yield from _bounded_lines(text)
        return
    text = io.TextIOWrapper(source, encoding="utf-8", errors="replace", newline="")
    try:
        yield from _bounded_lines(text)
    finally:
        text.detach()  # the caller's stream stays open: it is theirs to close


def _bounded_lines(text: io.TextIOWrapper) -> Iterator[str]:
    """Lines cut to MAX_LOG_LINE_CHARS: the rest of a longer line is read past, never held."""
    while line := text.readline(MAX_LOG_LINE_CHARS):
        yield line
        while len(line) == MAX_LOG_LINE_CHARS and not line.endswith(("\n", "\r")):
            line = text.readline(MAX_LOG_LINE_CHARS)
