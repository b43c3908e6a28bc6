"""The readers of untrusted bytes as fuzz targets: each may only return or raise the project's own errors.

Shared by the hypothesis tests (tests/test_fuzz.py) and the coverage-guided fuzzer (scripts/fuzz.py).
"""

from __future__ import annotations

from collections.abc import Callable

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_EXPERTS
from moe_model.llama.batching import stream_from
from moe_model.readers.gguf import parse_header
from moe_model.readers.logs import parse_log
from moe_model.readers.traces import load_any, open_trace
from moe_model.workload import Batching


def _gguf(data: bytes) -> None:
    parse_header(data)


def _trace(data: bytes) -> None:
    load_any(data, "fuzz.npz")


def _streamed_trace(data: bytes) -> None:
    for _ in stream_from(open_trace(data, "fuzz.npz"), Batching(), MAX_EXPERTS).chunks():
        pass


def _csv_trace(data: bytes) -> None:
    load_any(data, "fuzz.csv")


def _log(data: bytes) -> None:
    parse_log(data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "gguf": _gguf,
    "trace": _trace,
    "stream": _streamed_trace,
    "csv": _csv_trace,
    "log": _log,
}


class ReaderCrashError(AssertionError):
    """A reader crashed with a foreign exception or a message that is not one line."""


def check(target: str, data: bytes) -> None:
    """Run one target on `data`; anything but success or a one-line project error is a ReaderCrashError."""
    try:
        TARGETS[target](data)
    except MoeModelError as err:
        if "\n" in str(err) or not str(err):
            raise ReaderCrashError(f"{target}: a message that is not one line: {str(err)!r}") from err
    except Exception as err:  # noqa: BLE001 - finding these is the point
        raise ReaderCrashError(f"{target}: {type(err).__name__}: {err}") from err
