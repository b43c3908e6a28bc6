"""The project's own error types: one-line messages meant for end users."""

from __future__ import annotations

from collections.abc import Callable

StopCheck = Callable[[], bool] | None  # a long read asks it between blocks: True once the read is no longer wanted


class MoeModelError(Exception):
    """Base class: any input the library refuses, with a message a user can act on."""


class GGUFError(MoeModelError):
    """The bytes are not a GGUF header we can read (bad magic, absurd counts, unknown types)."""


class TruncatedHeaderError(GGUFError):
    """The data ends inside the GGUF header; `needed_bytes` is the least total size that could parse."""

    def __init__(self, have_bytes: int, needed_bytes: int) -> None:
        self.have_bytes = have_bytes
        self.needed_bytes = needed_bytes
        super().__init__(
            f"the GGUF header is cut off: got {have_bytes:,} bytes, need at least "
            f"{needed_bytes:,} ({needed_bytes - have_bytes:,} more); make a longer prefix, "
            f"e.g. head -c {_suggest_mib(needed_bytes)}M model.gguf > header.gguf"
        )


class WorkloadError(MoeModelError):
    """A routing trace or workload setting that does not fit the model or is malformed."""


class ReadStoppedError(WorkloadError):
    """A read given `should_stop` was stopped between two blocks because it returned True (its session ended)."""


def stop_if(should_stop: StopCheck) -> None:
    """Raise ReadStoppedError when `should_stop` says the read is no longer wanted (its session ended)."""
    if should_stop is not None and should_stop():
        raise ReadStoppedError("reading the trace was stopped before it finished")


class SourceError(MoeModelError):
    """A path or URL this deployment does not read (outside the allowed folders, a private host, a bad scheme)."""


class UnknownGpuError(MoeModelError):
    """A GPU name no preset has; `typed` is the name as given (the app words its advice for its own boxes)."""

    def __init__(self, typed: str, message: str) -> None:
        self.typed = typed
        super().__init__(message)


class ControlError(MoeModelError):
    """A refusal whose advice names the CLI's flags (its message) and, as `app`, the app's controls: the app shows
    its own words, never a flag it has no box for."""

    def __init__(self, message: str, app: str) -> None:
        self.app = app
        super().__init__(message)


def app_words(err: BaseException) -> str:
    """A library error as the app says it: a ControlError's words for the app's controls, else its message."""
    return err.app if isinstance(err, ControlError) else str(err)


class LinkRateError(MoeModelError):
    """A measured host-to-device rate above the link's line rate: not this link's (Hardware.with_link_gbs)."""


class LogError(MoeModelError):
    """A file that is not a llama.cpp log, or cannot be read as one."""


class MachineFileError(MoeModelError):
    """A machine file that `calibrate` did not write, or whose values are out of type or range."""


def one_line(err: BaseException) -> str:
    """A foreign exception's message cut to its first line (pandas and zipfile append details)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _suggest_mib(needed_bytes: int) -> int:
    """A round prefix size in MiB comfortably above what is needed."""
    mib = 1
    while mib * 1024 * 1024 < needed_bytes * 1.25:
        mib *= 2
    return mib
