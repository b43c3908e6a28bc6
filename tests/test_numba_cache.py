"""A kernel cache that heals (numba_cache): a cache that fails to load is set aside and the kernels compiled again;
a folder that cannot be written (a path under a file, a full disk) is skipped, the kernels kept in memory; each
says so in one line and the simulation answers as with a sound cache. Each case runs the CLI in a subprocess with
NUMBA_CACHE_DIR pointed at a folder of its own (the LRU kernels compile again there: ~10 s of CPU each)."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import run_cli
from conftest import QWEN30B, ROOT

from moe_model import numba_cache
from moe_model.llama import lru_kernel
from moe_model.policies import lru_lists
from moe_model.warmup import stamp_path

SIMULATE = ("simulate", "--model", str(QWEN30B), "--synthetic", "--tokens", "200", "--budget-mib", "5000")
SIMULATE += ("--build", "11549")  # the exact LRU: the fewest kernels to compile again


def _cli(cache: Path, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "moe_model", *SIMULATE]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600, preexec_fn=preexec)


@pytest.fixture(scope="module")
def answer() -> str:
    """The simulation's output with this session's sound cache."""
    out = run_cli(*SIMULATE)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return out.stdout


def _copy_of_this_cache(target: Path) -> Path:
    """This checkout's compiled kernels (their folders in this session's cache) and the install's stamp."""
    for kernel in (lru_kernel.record_experts, lru_lists.lru_lists_pass):
        folder = Path(kernel._cache.cache_path)
        shutil.copytree(folder, target / folder.name)
    stamp = stamp_path()
    shutil.copy(stamp, target / stamp.name)
    return target


def test_a_corrupted_cache_index_is_set_aside_in_one_line_and_the_kernels_compiled_again(tmp_path, answer):
    cache = _copy_of_this_cache(tmp_path / "numba")
    indexes = sorted(cache.glob("*/*.nbi"))
    assert len(indexes) >= 20
    for index in indexes:
        index.write_bytes(b"")  # numba: `EOFError: Ran out of input` in every page and simulation
    out = _cli(cache)
    assert out.returncode == 0 and out.stdout == answer
    (line,) = out.stderr.splitlines()
    aside = re.fullmatch(
        rf"the kernel cache folder {re.escape(str(cache))} could not be read \(EOFError: Ran out of input\): set "
        r"aside as (numba\.broken-[-0-9]+), the kernels are compiled again "
        r"\(about 14 s on a quiet machine, a minute or more on a busy one\)",
        line,
    )
    assert aside and (tmp_path / aside[1]).is_dir() and sorted((tmp_path / aside[1]).glob("*/*.nbi")) != []
    assert sorted(cache.glob("llama_*/*.nbi")) != []  # compiled again into a fresh folder, for the next run


def test_a_cache_folder_under_a_file_is_skipped_in_one_line_and_the_kernels_kept_in_memory(tmp_path, answer):
    (tmp_path / "a-file").write_text("")  # no folder can be made under it, whoever runs (root too)
    cache = tmp_path / "a-file" / "numba"
    out = _cli(cache)
    assert out.returncode == 0 and out.stdout == answer
    assert out.stderr.splitlines() == [
        f"the kernel cache folder {cache} cannot be written (Not a directory): the kernels are compiled in memory"
    ]


def test_a_cache_on_a_full_disk_is_skipped_in_one_line_and_the_kernels_kept_in_memory(tmp_path, answer):
    """A full disk as every user can make one: writes beyond 4 KiB fail (RLIMIT_FSIZE; Python ignores SIGXFSZ);
    numba's saves fail as on a full disk (before, `No space left on device` ended every simulation)."""
    cache = tmp_path / "numba"
    cache.mkdir()
    shutil.copy(stamp_path(), cache / stamp_path().name)  # compiled once, before the disk filled

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = _cli(cache, full_disk)
    assert out.returncode == 0 and out.stdout == answer
    assert out.stderr.splitlines() == [
        f"the kernel cache folder {cache} cannot be written (OSError: File too large): this run keeps the kernels "
        "in memory"
    ]


def test_the_kernel_context_is_set_up_ahead_as_a_first_kernel_load_would_and_its_lock_given_back():
    """recommend sets numba's context up while its workload is drawn (load_kernel_context): a fresh process has
    none, has it after the call, and another thread can take numba's compiler lock at once."""
    code = (
        "import threading\n"
        "from numba.core.base import builtin_registry\n"
        "from numba.core.compiler_lock import global_compiler_lock\n"
        "from numba.core.registry import cpu_target\n"
        "from moe_model.numba_cache import load_kernel_context\n"
        "before = builtin_registry in cpu_target.target_context._registries\n"
        "load_kernel_context()\n"
        "free = []\n"
        "taker = threading.Thread(target=lambda: free.append(global_compiler_lock._lock.acquire(blocking=False)))\n"
        "taker.start()\n"
        "taker.join()\n"
        "print(before, builtin_registry in cpu_target.target_context._registries, free)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.stdout.split() == ["False", "True", "[True]"], out.stderr


def test_the_kernels_compile_into_a_folder_per_version_of_their_sources_the_last_few_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "moe-cache-explorer" / "numba"
    for i, name in enumerate(("a", "b", "c", "d")):  # four older versions' kernels, the oldest first
        (root / name).mkdir(parents=True)
        os.utime(root / name, (i, i))
    numba_cache.use_user_cache_dir()
    here = root / numba_cache.kernel_sources_digest()
    assert os.environ["NUMBA_CACHE_DIR"] == str(here)
    assert sorted(f.name for f in root.iterdir()) == sorted(["c", "d", here.name])  # the 3 most recent
    monkeypatch.setattr(numba_cache, "KERNEL_FOLDERS", ("llama",))  # an edited kernel source: another folder
    assert numba_cache.kernel_sources_digest() != here.name
