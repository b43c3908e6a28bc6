"""Long library work (a curve's replays, a policy comparison) that its caller can watch and stop: the caller runs it
inside `watching(watch)`, the work calls `checkpoint` between its steps (chunks, budgets, policies). Outside
`watching` a checkpoint does nothing, so the CLI and the tests run the same code unwatched."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


class WorkStoppedError(Exception):
    """The caller stopped the work between two steps (its page was left): nobody waits for the answer."""


@dataclass
class Watch:
    """What the watcher sees of a run (the step it is at, `done` of `total` where the step counts them) and the
    event that stops it at its next checkpoint."""

    stop: threading.Event = field(default_factory=threading.Event)
    step: str = ""
    done: int = 0
    total: int = 0

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0


_WATCH: ContextVar[Watch | None] = ContextVar("moe_model_watch", default=None)


@contextmanager
def watching(watch: Watch) -> Iterator[Watch]:
    """Run the block's checkpoints (on this thread) against `watch`."""
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)


def checkpoint(step: str = "", done: int = 0, total: int = 0) -> None:
    """Between two steps of long work: raise WorkStoppedError if the watcher stopped it, else note where it is."""
    watch = _WATCH.get()
    if watch is None:
        return
    if watch.stop.is_set():
        raise WorkStoppedError(step or watch.step)
    if step:
        watch.step, watch.done, watch.total = step, done, total


def watched_steps(step: str, items: list) -> Iterator:
    """Each item in turn, a checkpoint before each (`step` with its count)."""
    for i, item in enumerate(items):
        checkpoint(step, i, len(items))
        yield item
