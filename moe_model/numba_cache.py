"""Numba's settings, made before numba is imported: its kernel cache in a user cache folder (kernels compile once
per install), and OpenMP threads that sleep between parallel kernels rather than spin; and `njit`, numba's with a
cache that heals (every kernel is declared with it): a damaged cache is set aside and the kernels compiled again, a
folder that cannot be written is skipped, each said in one line."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path

from moe_model.errors import one_line

# the kernels' first compilation as measured: ~14 s (README, `python -m moe_model.warmup` on a quiet machine), 64 s on
# a loaded one (issue 38): said as that, never as a bound a busy machine would break
COMPILE_TIME = "about 14 s on a quiet machine, a minute or more on a busy one"

PACKAGE = Path(__file__).resolve().parent
KERNEL_FOLDERS = ("llama", "policies")  # every @njit kernel lives in these folders
KEPT_KERNEL_VERSIONS = 3  # compiled kernels of this many versions of their sources stay in the user cache folder
_SET_HERE = "MOE_MODEL_SET_OMP_WAIT_POLICY"  # what this module set, so that only that is undone


def user_cache_folder(name: str) -> Path:
    """$XDG_CACHE_HOME (or ~/.cache)/moe-cache-explorer/NAME: what this install keeps between runs (not made here)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moe-cache-explorer" / name


def kernel_sources_digest() -> str:
    """A digest of every kernel's source file (KERNEL_FOLDERS) and numba's and Python's versions."""
    return _sources_digest(KERNEL_FOLDERS)


@functools.cache  # read once a process: at import (the cache folder) and for the warm-up stamp
def _sources_digest(folders: tuple[str, ...]) -> str:
    digest = hashlib.sha1(f"{PACKAGE}|{version('numba')}|{sys.version}".encode())
    for folder in folders:
        for source in sorted((PACKAGE / folder).glob("*.py")):
            digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def use_user_cache_dir() -> None:
    """NUMBA_CACHE_DIR = user_cache_folder("numba") / kernel_sources_digest(), unless already set: numba keys a
    cached kernel by its own file alone, so a kernel that calls one in another file would keep the old callee's
    code; a folder per version of the sources compiles them all again instead. The KEPT_KERNEL_VERSIONS most
    recently used folders are kept."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    folder = user_cache_folder("numba") / kernel_sources_digest()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)
    except OSError:
        return  # an unwritable home: numba keeps its default, next to the sources
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    _drop_old_versions(folder.parent)


def _drop_old_versions(root: Path) -> None:
    """Remove the kernel folders of sources no longer used, beyond the KEPT_KERNEL_VERSIONS most recent."""
    try:
        versions = sorted((f for f in root.iterdir() if f.is_dir()), key=lambda f: f.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in versions[KEPT_KERNEL_VERSIONS:]:
        shutil.rmtree(old, ignore_errors=True)


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


@functools.cache
def parallel_kernels_may_overlap() -> bool:
    """Whether two threads may launch numba parallel kernels at once: yes with its OpenMP or TBB layer, no with its
    workqueue layer (where neither loads), which aborts the process when they do."""
    import numba
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()  # numba picks its layer at the first parallel launch: this makes that choice now
    return numba.threading_layer() != "workqueue"


def load_kernel_context() -> None:
    """What numba's first cached-kernel load in a process sets up (its CPU target's registries and runtime: ~0.2 s,
    the same for every kernel), done now under its compiler lock as that load does it (after that, a few
    milliseconds): a caller can do it while a thread makes the kernels' inputs."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        cpu_target.target_context.refresh()


# --- a kernel cache that heals: what numba's own cache does not (it raises, and every simulation fails with it) ---

NOTICES: list[str] = []  # the lines said about the kernel cache in this process (the app may show them)
_GUARD = threading.Lock()
_STATE = {"installed": False, "saves": True, "set_aside": False}


def njit(*args, **kwargs):
    """numba.njit, its kernel cache guarded (guard_cache) before the first kernel is declared."""
    import numba

    guard_cache()
    return numba.njit(*args, **kwargs)


def guard_cache() -> None:
    """Once per process: a cache folder that cannot be written is skipped (kernels compiled in memory); a cached
    kernel that fails to load sets the cache folder aside and is compiled again; a save that fails (a full disk)
    stops this process's saves. Each says so in one line (say), naming the folder."""
    from numba.core.caching import Cache
    from numba.core.dispatcher import Dispatcher

    with _GUARD:
        if _STATE["installed"]:
            return
        _STATE["installed"] = True
        folder = _cache_root(None)
        problem = folder and unwritable(folder)
        if problem:
            say(f"the kernel cache folder {folder} cannot be written ({problem}): the kernels are compiled in memory")
            Dispatcher.enable_caching = lambda self: None  # numba would fall back to the package's own folder
        Cache.load_overload = _guarded_load(Cache.load_overload)
        Cache.save_overload = _guarded_save(Cache.save_overload)


def say(line: str) -> None:
    """One line about the kernel cache, to stderr (the CLI's and the server's console) and NOTICES."""
    NOTICES.append(line)
    print(line, file=sys.stderr, flush=True)


def _cache_root(cache_path: str | None) -> Path | None:
    """The NUMBA_CACHE_DIR numba read (every kernel's folder lies in it) where it holds `cache_path`, else the
    kernel's own cache folder."""
    from numba.core import config

    root = config.CACHE_DIR
    if root and (cache_path is None or Path(cache_path).is_relative_to(root)):
        return Path(root)
    return Path(cache_path) if cache_path else None


def unwritable(folder: Path) -> str | None:
    """Why a file cannot be made in `folder` (made first if missing), or None: a path under a file, a read-only or
    full file system (a full one may still make an empty file: saves say so when they fail)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return err.strerror or type(err).__name__


def _guarded_load(load):
    def load_overload(self, sig, target_context):
        try:
            return load(self, sig, target_context)
        except Exception as err:  # any damage to a cache file: compiling again is always right
            _set_aside(_cache_root(self._cache_path), err)
            return None

    return load_overload


def _guarded_save(save):
    def save_overload(self, sig, data):
        if not _STATE["saves"]:
            return
        try:
            save(self, sig, data)
        except Exception as err:  # the kernel is compiled and runs: only the copy on disk is lost
            with _GUARD:
                if _STATE["saves"]:
                    _STATE["saves"] = False
                    folder = _cache_root(self._cache_path)
                    say(
                        f"the kernel cache folder {folder} cannot be written ({_why(err)}): this run keeps the "
                        "kernels in memory"
                    )

    return save_overload


def _set_aside(folder: Path, err: Exception) -> None:
    """Rename a cache folder that failed to load, once; this process then compiles into a fresh one."""
    with _GUARD:
        if _STATE["set_aside"] or not folder.exists():
            return  # set aside already, by this process's other thread or another process
        _STATE["set_aside"] = True
        aside = folder.with_name(f"{folder.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:
            folder.rename(aside)
        except OSError as rename_err:
            _STATE["saves"] = False
            say(
                f"the kernel cache folder {folder} could not be read ({_why(err)}) nor set aside "
                f"({_why(rename_err)}): the kernels are compiled again, in memory"
            )
            return
        say(
            f"the kernel cache folder {folder} could not be read ({_why(err)}): set aside as {aside.name}, "
            f"the kernels are compiled again ({COMPILE_TIME})"
        )


def _why(err: Exception) -> str:
    """`EOFError: Ran out of input`, `OSError: No space left on device`: the error's kind and its first line."""
    detail = err.strerror if isinstance(err, OSError) and err.strerror else one_line(err)
    return f"{type(err).__name__}: {detail}"
