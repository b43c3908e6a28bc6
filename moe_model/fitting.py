"""The one fitting routine of the project's models (synthetic routing knobs, time-model parameters)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

GOLDEN = (np.sqrt(5) - 1) / 2
T = TypeVar("T")


def coordinate_search(
    loss: Callable[[T], float],
    start: T,
    bounds: Mapping[str, tuple[float, float]],
    names: Sequence[str],
    rounds: int,
    steps: int,
    log_space: bool = False,
    digits: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> T:
    """Minimise loss over the named fields of a frozen dataclass, one at a time, by golden-section search
    inside bounds[name], for a few rounds; a field's new value is kept only if it does not raise the loss.

    log_space searches the logarithm (for parameters spanning decades); digits rounds each new value.
    """
    to_value = (lambda u: float(np.exp(u))) if log_space else (lambda u: u)
    best = start
    total, done = rounds * len(names) * steps, 0
    for _ in range(rounds):
        for name in names:
            a, b = (np.log(max(v, 1e-6)) for v in bounds[name]) if log_space else bounds[name]
            for _ in range(steps):
                c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
                if loss(replace(best, **{name: to_value(c)})) < loss(replace(best, **{name: to_value(d)})):
                    b = d
                else:
                    a = c
                done += 1
                if progress:
                    progress(done / total)
            middle = to_value((a + b) / 2)
            candidate = replace(best, **{name: middle if digits is None else round(float(middle), digits)})
            if loss(candidate) <= loss(best):
                best = candidate
    return best
