"""The bundled data, found through importlib.resources wherever the package is installed.

Two folders, split by who opens them:
- `sample_data/` at the repository's top level (installed as the package `moe_model_samples`): what a user opens,
  the sample model headers, llama.cpp logs, routing traces and the ground-truth runs (SAMPLE_FOLDERS);
- `moe_model/data/`: the package's own tables, which the library reads to answer (the calibrated time model, the
  synthetic routing presets, the machines, the reference and field measurements).

The rule: `data_path`'s first part picks the folder; a name in SAMPLE_FOLDERS resolves into `sample_data/`, any other
name (and no name at all) into `moe_model/data/`.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SAMPLE_FOLDERS = frozenset({"models", "logs", "traces", "groundtruth"})
SAMPLES_PACKAGE = "moe_model_samples"  # pyproject.toml's package-dir maps it onto sample_data/


def sample_data_root() -> Path:
    """`sample_data/`: beside moe_model/ in a checkout (installed editable or not), else the installed package; in
    a checkout without it, where it would be (a sample file opened there is named missing, nothing else fails)."""
    beside = Path(str(files("moe_model"))).parent / "sample_data"
    if beside.is_dir():
        return beside
    try:
        return Path(str(files(SAMPLES_PACKAGE)))
    except ModuleNotFoundError:
        return beside


def data_path(*parts: str) -> Path:
    """A bundled file or folder, e.g. data_path("models") (sample_data/) or data_path("calibration.json")."""
    if parts and parts[0] in SAMPLE_FOLDERS:
        return sample_data_root().joinpath(*parts)
    return Path(str(files("moe_model").joinpath("data", *parts)))
