"""data_path's split: what a user opens resolves into the top-level sample_data/, the package's own tables into
moe_model/data/; pyproject.toml installs sample_data/ as the package moe_model_samples (the install itself is run in
tests/test_jupyter.py)."""

from __future__ import annotations

import pytest
from conftest import PACKAGE_DATA, ROOT, SAMPLE

from moe_model.resources import SAMPLE_FOLDERS, SAMPLES_PACKAGE, data_path, sample_data_root

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_sample_headers_resolve_into_the_top_level_sample_data():
    assert sample_data_root() == SAMPLE == ROOT / "sample_data"
    assert data_path("models") == SAMPLE / "models"
    assert len(list(data_path("models").glob("*.gguf"))) >= 5
    assert data_path("groundtruth", "run3", "model-header.gguf").is_file()


@pytest.mark.parametrize("folder", sorted(SAMPLE_FOLDERS))
def test_each_sample_folder_lives_in_sample_data_only(folder):
    assert data_path(folder).parent == SAMPLE and data_path(folder).is_dir()
    assert not (PACKAGE_DATA / folder).exists()


def test_every_other_name_is_the_packages_own_data():
    own = {p.name for p in PACKAGE_DATA.iterdir()}
    assert {"calibration.json", "synthetic_presets.json", "machines.json", "reference-measurements.csv"} <= own
    assert not own & SAMPLE_FOLDERS
    assert all(data_path(name) == PACKAGE_DATA / name for name in own)
    assert data_path() == PACKAGE_DATA


def test_sample_data_holds_only_the_sample_folders_and_its_package_marker():
    names = {p.name for p in SAMPLE.iterdir() if p.name != "__pycache__"}
    assert names == SAMPLE_FOLDERS | {"__init__.py"}


def test_pyproject_installs_sample_data_as_the_samples_package_with_its_files():
    config = _setuptools()
    assert config["package-dir"] == {SAMPLES_PACKAGE: "sample_data"}
    assert config["package-data"][SAMPLES_PACKAGE] == ["**/*"] and config["package-data"]["moe_model"] == ["data/**/*"]


def test_pyproject_lists_every_package_of_the_tree():
    """The list is written out (sample_data/ installs under another name): a new folder of moe_model must join it."""
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "moe_model").rglob("__init__.py")}
    assert set(_setuptools()["packages"]) == tree | {SAMPLES_PACKAGE}


def test_a_checkout_without_sample_data_predicts_and_names_a_missing_sample_in_one_line(tmp_path):
    """Issue 39: without sample_data/ (and no moe_model_samples installed), predict and recommend ended in
    `unexpected ModuleNotFoundError` at import; they need no sample, and a sample asked for is named missing."""
    import json
    import subprocess
    import sys

    (tmp_path / "moe_model").symlink_to(ROOT / "moe_model")  # a checkout of the package alone
    model = tmp_path / "my.gguf"
    model.write_bytes((SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf").read_bytes())
    child = f"""
import contextlib, io, json, sys
sys.modules["{SAMPLES_PACKAGE}"] = None  # not installed either: importing it raises ModuleNotFoundError
from moe_model.cli.main import main
from moe_model.resources import data_path
out = {{}}
for name, argv in (("predict", ["predict", "--model", "{model}", "--hardware", "t4", "--hit-rate", "0.9"]),
                   ("plan", ["plan", str(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf")), "--budget-mib", "100"])):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        out[name] = (main(argv), err.getvalue())
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["predict"] == [0, "note: 't4' is the Tesla T4 preset (15 GB, 320 GB/s, PCIe 3.0 x16)\n"]
    missing = tmp_path / "sample_data" / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf"
    assert out["plan"] == [1, f"error: no such file: {missing}\n"]
