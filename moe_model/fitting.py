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


def least_squares(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    iterations: int = 80,
    step: float = 1e-4,
) -> np.ndarray:
    """Minimise |residuals(x)|^2 inside [lower, upper] by Levenberg-Marquardt with a forward-difference Jacobian
    (for smooth deterministic models such as the time model; the routing knobs use coordinate_search)."""
    x = np.clip(np.asarray(x0, dtype=float), lower, upper)
    r = residuals(x)
    cost, damping = float(r @ r), 1e-2
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = step if x[j] + step <= upper[j] else -step
            shifted = x.copy()
            shifted[j] += h
            jac[:, j] = (residuals(shifted) - r) / h
        normal, gradient = jac.T @ jac, jac.T @ r
        while damping < 1e10:
            trial = np.clip(
                x - np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), gradient), lower, upper
            )
            r_trial = residuals(trial)
            if float(r_trial @ r_trial) < cost:
                break
            damping *= 4
        else:
            return x
        improvement = cost - float(r_trial @ r_trial)
        x, r, cost, damping = trial, r_trial, float(r_trial @ r_trial), max(damping / 3, 1e-9)
        if improvement < 1e-12 * max(cost, 1e-12):
            break
    return x
