"""Numba's settings, made before numba is imported: its kernel cache in a user cache folder (kernels compile once
per install), and OpenMP threads that sleep between parallel kernels rather than spin."""

from __future__ import annotations

import os
from pathlib import Path

_SET_HERE = "MOE_MODEL_SET_OMP_WAIT_POLICY"  # what this module set, so that only that is undone


def use_user_cache_dir() -> None:
    """NUMBA_CACHE_DIR = $XDG_CACHE_HOME (or ~/.cache)/moe-cache-explorer/numba, unless already set."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moe-cache-explorer" / "numba"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # an unwritable home: numba keeps its default, next to the sources
    os.environ["NUMBA_CACHE_DIR"] = str(folder)


def sleep_between_parallel_kernels() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless already set: numba's OpenMP threads (ClassLRU's pool sizes) otherwise spin
    after each chunk's kernel, taking a core from the passes running beside it (`simulate --policy all` on 4
    budgets, alternated in one sitting at load 9-17: 17.3 s of user CPU with ACTIVE, 12.1-12.6 s with PASSIVE)."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = os.environ[_SET_HERE] = "PASSIVE"


def openmp_as_llama_cpp_runs_it() -> None:
    """Undo sleep_between_parallel_kernels before llama.cpp's OpenMP loads (libgomp reads it once, at load): its
    threads meet at a barrier after every graph node, and sleeping there slowed `record`'s CPU decode 1.4x at 2
    threads (docs/record.md). A policy the user set stays."""
    if os.environ.pop(_SET_HERE, None) == os.environ.get("OMP_WAIT_POLICY"):
        os.environ.pop("OMP_WAIT_POLICY", None)


use_user_cache_dir()
sleep_between_parallel_kernels()
