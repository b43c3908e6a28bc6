"""Numba's settings, made before numba is imported: its kernel cache in a user cache folder (kernels compile once
per install), and OpenMP threads that sleep between parallel kernels rather than spin."""

from __future__ import annotations

import os
from pathlib import Path


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
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


use_user_cache_dir()
sleep_between_parallel_kernels()
