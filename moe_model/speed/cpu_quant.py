"""The CPU expert path by quantization: how fast the host multiplies a byte of each ggml type's expert weights.

A CPU computing experts reads their bytes and dequantizes them. The K-quants and Q8_0 dequantize in a few integer
operations per weight, so bandwidth and the int8 dot products bound them; codebook types (IQ2_XXS, IQ3_XXS, ...) look
every group of weights up in a grid first, so a byte of them costs more work. The time model prices the host's
expert matmuls at a rate in q4_K-equivalent bytes (`rates.cpu_expert_gbs`) times a factor per type: the rate of a
byte of that type relative to a byte of q4_K at the same threads (`moe_model/data/cpu_quant_factors.json`, each
factor with its source). A model's factor is the harmonic mean over its expert tensors' bytes: a token reads every
tensor's slice, each at its own rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from moe_model.readers.model_spec import ModelSpec
from moe_model.resources import data_path

FACTORS_JSON = "cpu_quant_factors.json"
BYTES_ONLY = "not measured: priced by its bytes alone, as the reference type"


@dataclass(frozen=True)
class QuantFactor:
    """A type's CPU rate per byte relative to the reference type (q4_K) at the same threads, and where it comes from."""

    type_name: str
    factor: float
    source: str


@cache
def _table() -> dict:
    return json.loads(data_path(FACTORS_JSON).read_text())


def reference_type() -> str:
    return _table()["reference"]


def quant_factor(type_name: str) -> QuantFactor:
    """The factor of one ggml type (by ggml_type_name, e.g. "iq3_xxs", "q4_K"); 1 for a type the table lacks."""
    row = _table()["factors"].get(type_name)
    if row is None:
        return QuantFactor(type_name, 1.0, BYTES_ONLY)
    return QuantFactor(type_name, float(row["factor"]), row["source"])


@cache
def expert_quant_factor(model: ModelSpec) -> float:
    """The rate of a byte of the model's experts relative to q4_K: total bytes over the time each type's bytes take
    (per token every expert tensor's slice is read, so the slices' bytes weigh each type)."""
    by_type: dict[str, float] = {}
    for layer in model.layers:
        for tensor in layer.experts:
            by_type[tensor.type_name] = by_type.get(tensor.type_name, 0.0) + tensor.expert_bytes
    total = sum(by_type.values())
    if not total:
        return 1.0
    return total / sum(b / quant_factor(t).factor for t, b in by_type.items())


def expert_quant_factors(model: ModelSpec) -> tuple[QuantFactor, ...]:
    """The factor of each expert type the model has (for a page or a report to say which were measured)."""
    names = dict.fromkeys(t.type_name for layer in model.layers for t in layer.experts)
    return tuple(quant_factor(name) for name in names)
