"""The package's bundled data (`moe_model/data/`), found through importlib.resources wherever it is installed."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_path(*parts: str) -> Path:
    """A bundled data file or folder, e.g. data_path("models") or data_path("calibration.json")."""
    return Path(str(files("moe_model").joinpath("data", *parts)))
