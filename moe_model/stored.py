"""Drawn routing kept between runs: what a generator draws is a function of its code, its inputs and numpy's
build alone, so the preset's trace a command replays, the prompt window curve and the prompts' drawn routing are
drawn once per install and read back after (numba_cache.user_cache_folder("routing"), beside numba's kernels). A
file that cannot be read whole, or whose checksum does not match, is drawn again and replaced; a folder that cannot
be written is skipped (drawn every time); at most limits.ROUTING_STORED_BYTES are kept, the least recently used
files dropped."""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from moe_model.atomic import write_atomic
from moe_model.limits import ROUTING_STORED_BYTES
from moe_model.numba_cache import user_cache_folder

LIMITS = Path(__file__).with_name("limits.py")  # the bounds every generator reads: a change draws them all again


def stored(name: str, inputs: tuple, draw: Callable[[], np.ndarray], code: Path) -> np.ndarray:
    """draw()'s array for these inputs, read back where an earlier run kept it, else drawn and kept; `code`: the
    generator's source file (a change to it, or to limits.py, draws again)."""
    path = user_cache_folder("routing") / f"{name}-{_key(name, inputs, code)}.npz"
    kept = _read(path)
    if kept is not None:
        return kept
    drawn = draw()
    _keep(path, drawn)
    return drawn


def _key(name: str, inputs: tuple, code: Path) -> str:
    """What a draw depends on: the inputs, the generator's source, numpy's version and the CPU features its
    kernels dispatch on (np.argpartition's order of ties may differ between them)."""
    features = getattr(np._core._multiarray_umath, "__cpu_features__", {})
    build = (np.__version__, sorted(f for f, on in features.items() if on))
    digest = hashlib.sha256(repr((name, inputs, build)).encode())
    for source in (code, LIMITS):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:32]


def _checksum(data: np.ndarray) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(data).tobytes()).digest(), dtype=np.uint8)


def _read(path: Path) -> np.ndarray | None:
    try:
        with path.open("rb") as file, np.load(file, allow_pickle=False) as kept:  # closed when np.load fails too
            data, checksum = kept["data"], kept["sha256"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # missing, cut short, not an archive
        return None
    if not np.array_equal(checksum, _checksum(data)):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept longest
    return data


def _keep(path: Path, data: np.ndarray) -> None:
    """Written whole or not at all (not at all above ROUTING_STORED_BYTES); then the least recently used files
    beyond ROUTING_STORED_BYTES dropped."""
    if data.nbytes > ROUTING_STORED_BYTES:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: np.savez(f, data=data, sha256=_checksum(data)))
        files = [(f.stat(), f) for f in path.parent.glob("*.npz")]
        total = 0
        for stat, file in sorted(files, key=lambda s_f: s_f[0].st_mtime, reverse=True):
            total += stat.st_size
            if total > ROUTING_STORED_BYTES:
                file.unlink(missing_ok=True)
    except OSError:
        return  # an unwritable or full cache folder, or a file another run dropped: drawn again next time
