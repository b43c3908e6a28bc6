"""The kernels' first compilation: a first run says it is compiling and how long it took, later runs say nothing;
every kernel releases the GIL, so one session's simulation does not hold the app's other sessions."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys

from numba.core.registry import CPUDispatcher

import moe_model.llama
import moe_model.policies
from moe_model import numba_cache, warmup


def test_the_first_run_after_install_says_it_compiles_and_how_long_later_runs_say_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the stamp lives there: a fresh install
    said: list[str] = []
    warmup.ensure_compiled(said.append)
    assert len(said) == 2 and said[0].startswith("compiling the simulation kernels once")
    assert said[1].startswith("compiled the kernels in ") and said[1].endswith(" s")
    warmup.ensure_compiled(said.append)
    assert len(said) == 2 and warmup.is_compiled()


def test_an_edited_kernel_source_needs_a_new_compilation(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    before = warmup.stamp_path()
    monkeypatch.setattr(numba_cache, "KERNEL_FOLDERS", ("llama",))  # other sources: another stamp
    assert warmup.stamp_path() != before


def kernels() -> list[CPUDispatcher]:
    found = []
    for package in (moe_model.llama, moe_model.policies):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found += [
                v for v in vars(module).values() if isinstance(v, CPUDispatcher) and v.__module__ == module.__name__
            ]
    return found


def test_every_kernel_releases_the_gil():
    found = kernels()
    assert len(found) >= 20  # every @njit of llama/ and policies/
    assert [k.py_func.__qualname__ for k in found if not k.targetoptions.get("nogil")] == []


def test_openmp_threads_sleep_between_parallel_kernels_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    numba_cache.sleep_between_parallel_kernels()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    numba_cache.sleep_between_parallel_kernels()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


# in a fresh process with an empty kernel cache (this one's kernels may have run in other tests, and a cached caller
# loads without compiling its callees): the warm-up, then each kernel not inlined into its callers left uncompiled
UNCOMPILED_AFTER_WARM_UP = """
import moe_model.warmup  # before numba: moe_model reads NUMBA_CACHE_DIR (here the empty one) first
import test_warmup
moe_model.warmup.warm_up()
print([k.py_func.__qualname__ for k in test_warmup.kernels()
       if not k.signatures and k.targetoptions.get("inline") != "always"])
"""


def test_the_warm_up_compiles_every_kernel_a_page_would_otherwise_compile_on_first_use(tmp_path):
    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.path.dirname(here)]), "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", UNCOMPILED_AFTER_WARM_UP], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
