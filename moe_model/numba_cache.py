"""Point numba's kernel cache at a user cache folder before numba is imported: kernels compile once per install."""

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


use_user_cache_dir()
