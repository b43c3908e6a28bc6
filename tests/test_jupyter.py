"""The README's and docs/jupyter.md's notebook cells run in a fresh environment after `pip install -e .`, from
another directory, with figures an exported HTML notebook can draw; an editable install and a copy installed with
`pip install .` find their bundled data (sample_data/ among it).

The notebook tests share one venv (module fixture) that borrows this environment's dependencies (a .pth file);
this environment's pip installs the package into it, as a user would (the build fetches setuptools from the
configured index).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT

from moe_model.llama.builds import MAINLINE_BUILD

nbformat = pytest.importorskip("nbformat", reason="requirements-dev.txt: nbformat, nbclient, ipykernel")
nbclient = pytest.importorskip("nbclient", reason="requirements-dev.txt: nbformat, nbclient, ipykernel")

pytestmark = pytest.mark.slow

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def _run(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    return out


def _clean_env(**extra: str) -> dict:
    """This process's environment without a PYTHONPATH that could point back at the checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | extra


@pytest.fixture(scope="module")
def editable_python(tmp_path_factory) -> Path:
    """A venv's python with `pip install -e .` of this checkout (dependencies borrowed from this environment)."""
    home = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", "--without-pip", str(home), cwd=home)  # this pip installs into it (seconds)
    python = home / "bin" / "python"
    site = _run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=home)
    Path(site.stdout.strip(), "_borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = (sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "-e", str(ROOT))
    _run(*install, cwd=home, env=_clean_env())
    return python


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def _readme_cell() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## In Jupyter") :]
    return _python_blocks(section[: section.index("\n## ", 3)])[0]


def _execute(cells: list[str], python: Path, where: Path, monkeypatch) -> list:
    """Run the cells as one notebook in a kernel of `python`, with `where` as the working directory."""
    kernels = where / "jupyter" / "kernels" / "moe-test"
    kernels.mkdir(parents=True)
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec | {"display_name": "moe test"}))
    monkeypatch.setenv("JUPYTER_PATH", str(where / "jupyter"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="moe-test", resources={"metadata": {"path": str(where)}}
    )
    client.execute()
    return nb.cells


def _figure_outputs(cell) -> list[dict]:
    return [o["data"] for o in cell.outputs if o.get("output_type") in ("execute_result", "display_data")]


@pytest.mark.parametrize("source", ["README.md", "docs/jupyter.md"])
def test_the_jupyter_cells_run_from_another_directory_after_pip_install_e(
    source, editable_python, tmp_path, monkeypatch
):
    text = (ROOT / source).read_text()
    cells = [_readme_cell()] if source == "README.md" else _python_blocks(text)
    where_from = "import moe_model, os; print(moe_model.__file__); print(os.getcwd())"
    done = _execute([*cells, where_from], editable_python, tmp_path, monkeypatch)
    figure = _figure_outputs(done[0])
    assert figure and PLOTLY_MIME in figure[0]  # drawn live
    title = figure[0][PLOTLY_MIME]["layout"]["title"]  # its policy and build named: the default build's
    assert title["subtitle"]["text"] == f"class-lru-b12170 (modelled), llama.cpp b{MAINLINE_BUILD}"
    html = figure[0]["text/html"]
    assert "Plotly.newPlot" in html and "* plotly.js v" in html  # what an HTML export keeps, plotly.js inside it
    assert not re.search(r"<script[^>]*\bsrc=", html)  # so it draws with no network
    module, cwd = "".join(o.get("text", "") for o in done[-1].outputs).split()
    assert Path(module) == ROOT / "moe_model" / "__init__.py" and Path(cwd) == tmp_path  # the checkout, elsewhere
    if source == "docs/jupyter.md":
        printed = "".join(o.get("text", "") for o in done[1].outputs)
        assert "is the H200 preset" in printed and "t/s decode (range" in printed


def test_an_editable_install_finds_sample_data_in_the_checkout_from_another_directory(editable_python, tmp_path):
    probe = "from moe_model.resources import data_path; print(data_path('models', 'Qwen3-30B-A3B-Q4_K_M.gguf'))"
    out = _run(str(editable_python), "-c", probe, cwd=tmp_path, env=_clean_env())
    assert Path(out.stdout.strip()) == ROOT / "sample_data" / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf"


def test_a_copy_installed_with_pip_finds_its_bundled_data_from_any_directory(tmp_path):
    site = tmp_path / "site"
    _run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(ROOT),
         cwd=tmp_path, env=_clean_env())  # fmt: skip
    probe = (
        "import moe_model; from moe_model.resources import data_path; from moe_model import load_model\n"
        "print(moe_model.__file__); print(data_path()); print(data_path('models'))\n"
        "print(len(list(data_path('models').glob('*.gguf'))))\n"
        "print(load_model(data_path('groundtruth', 'run3', 'model-header.gguf')).n_layer)\n"
        "from moe_model.fits.calibration import default_time_model; print(default_time_model().rel_error > 0)"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run(sys.executable, "-c", probe, cwd=elsewhere, env=_clean_env(PYTHONPATH=str(site)))
    module, data, models, n_models, n_layer, calibrated = out.stdout.split()
    assert Path(module).is_relative_to(site) and Path(data) == site / "moe_model" / "data"
    assert Path(models) == site / "moe_model_samples" / "models"  # sample_data/, installed under the package's name
    assert int(n_models) >= 5 and n_layer == "24" and calibrated == "True"
