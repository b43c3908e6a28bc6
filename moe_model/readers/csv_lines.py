"""A CSV trace's cheap facts, checked before pandas reads any of it: its first line (length, columns), then every
line's field count and length, a block at a time with numpy (~1 ms per MiB). pandas given a header of 10^7 columns
held a core for over 10 minutes; given a row of 100,003 fields under a short header it made the extra fields an
index, 3.6 GiB from 357 KB. Readers that take `should_stop` call it between blocks (stop_if)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from moe_model.errors import StopCheck, WorkloadError, stop_if
from moe_model.limits import CSV_BLOCK_BYTES, MAX_CSV_COLUMNS, MAX_CSV_LINE_BYTES


@dataclass(frozen=True)
class CsvLines:
    """A checked CSV trace: its header's names (stripped), where its data lines begin, how many there are (a blank
    line counted too)."""

    names: tuple[str, ...]
    data_at: int
    lines: int


def csv_header(raw: BinaryIO) -> bytes:
    """The first line, refused beyond MAX_CSV_LINE_BYTES or MAX_CSV_COLUMNS fields before anything parses it."""
    raw.seek(0)
    line = raw.readline(MAX_CSV_LINE_BYTES + 1)
    if len(line.rstrip(b"\r\n")) > MAX_CSV_LINE_BYTES:
        raise WorkloadError(
            f"the CSV trace's first line is longer than {MAX_CSV_LINE_BYTES // 1024:,} KiB: a trace's header names "
            "seq, token, layer and its expert columns e0, e1, ..."
        )
    if line.count(b",") + 1 > MAX_CSV_COLUMNS:
        raise WorkloadError(
            f"the CSV trace's header has {line.count(b',') + 1:,} columns, above this tool's limit of "
            f"{MAX_CSV_COLUMNS}: a trace's header names seq, token, layer and its expert columns e0, e1, ..."
        )
    return line


def scan_csv_lines(raw: BinaryIO, should_stop: StopCheck = None) -> CsvLines:
    """The header checked, then every data line: as many fields as the header, at most MAX_CSV_LINE_BYTES long;
    one line naming the first line that is not, read CSV_BLOCK_BYTES at a time."""
    head = csv_header(raw)
    fields, lines, carry = head.count(b",") + 1, 0, b""
    while block := raw.read(CSV_BLOCK_BYTES):
        stop_if(should_stop)
        data = carry + block
        cut = data.rfind(b"\n") + 1
        lines += check_fields(data[:cut], fields, lines + 2)
        carry = data[cut:]
        if len(carry) > MAX_CSV_LINE_BYTES:
            raise WorkloadError(
                f"line {lines + 2:,} of the CSV trace is longer than {MAX_CSV_LINE_BYTES // 1024:,} KiB"
            )
    if carry:
        lines += check_fields(carry + b"\n", fields, lines + 2)
    names = tuple(c.strip() for c in head.decode("utf-8", "replace").strip().split(","))
    return CsvLines(names, len(head), lines)


def check_fields(block: bytes, fields: int, first_line: int) -> int:
    """The lines of `block` (whole lines, each ending in a newline), each blank or of `fields` fields and at most
    MAX_CSV_LINE_BYTES; its lines are numbered from `first_line` in the message."""
    if not block:
        return 0
    text = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(text == ord("\n"))
    starts = np.concatenate([[0], ends[:-1] + 1])
    commas = np.flatnonzero(text == ord(","))
    found = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
    length = ends - starts
    blank = (length == 0) | ((length == 1) & (text[np.maximum(ends - 1, 0)] == ord("\r")))
    bad = np.flatnonzero(((found != fields) & ~blank) | (length > MAX_CSV_LINE_BYTES))
    if len(bad):
        i = int(bad[0])
        if length[i] > MAX_CSV_LINE_BYTES:
            raise WorkloadError(
                f"line {first_line + i:,} of the CSV trace is longer than {MAX_CSV_LINE_BYTES // 1024:,} KiB"
            )
        raise WorkloadError(
            f"line {first_line + i:,} of the CSV trace has {int(found[i]):,} fields; its header has {fields:,}"
        )
    return len(ends)
