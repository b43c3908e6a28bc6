"""The CPU expert path by quantization: how fast the host multiplies a byte of each ggml type's expert weights.

A CPU computing experts reads their bytes and dequantizes them. The K-quants and Q8_0 dequantize in a few integer
operations per weight, so bandwidth and the int8 dot products bound them; codebook types (IQ2_XXS, IQ3_XXS, ...) look
every group of weights up in a grid first, so a byte of them costs more work. The time model prices the host's
expert matmuls at a rate in q4_K-equivalent bytes (`rates.cpu_expert_gbs`) times a factor per type: the rate of a
byte of that type relative to a byte of q4_K at the same threads. A model's factor is the harmonic mean over its
expert tensors' bytes: a token reads every tensor's slice, each at its own rate.

The factors come first-hand where measured (`moe_model/data/cpu_quant_rates.json`: llama-bench -ngl 0 on one model
shape with its experts in each type, at 2/4/8/16 threads; a type's factor at N threads is its expert-only GB/s over
q4_K's at N, between measured thread counts interpolated in log threads, outside them the nearest), else from
`moe_model/data/cpu_quant_factors.json` (each factor with its source); a type in neither is priced by its bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache, lru_cache

from gguf import GGMLQuantizationType

from moe_model.readers.model_spec import ModelSpec, ggml_type_name
from moe_model.resources import data_path

FACTORS_JSON = "cpu_quant_factors.json"
RATES_JSON = "cpu_quant_rates.json"
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


def _row_gbs(row: dict) -> float:
    """A measured row's expert-only GB/s (the type-independent part of a token taken off), else its whole-token one."""
    return row.get("expert_only_gbs") or row["expert_gbs"]


@cache
def first_hand() -> tuple[dict[str, dict[int, float]], str]:
    """Per type (ggml_type_name) and thread count, the measured factor against the reference at the same threads,
    and the measurement's source line; empty where the file is not bundled."""
    path = data_path(RATES_JSON)
    if not path.exists():
        return {}, ""
    data = json.loads(path.read_text())
    gbs: dict[str, dict[int, float]] = {}
    for row in data["rows"]:
        name = ggml_type_name(GGMLQuantizationType[row["type"]].value)
        gbs.setdefault(name, {})[int(row["threads"])] = _row_gbs(row)
    reference = gbs.get(reference_type(), {})
    factors = {
        name: {n: rate / reference[n] for n, rate in by_threads.items() if n in reference}
        for name, by_threads in gbs.items()
    }
    src = data["source"]
    return {k: v for k, v in factors.items() if v}, f"measured: {src['run']} ({src['host']}, {src['build']})"


def _at_threads(by_threads: dict[int, float], threads: int) -> float:
    """The factor at `threads`: interpolated in log threads between the measured counts, the nearest outside them."""
    counts = sorted(by_threads)
    if threads <= counts[0] or threads >= counts[-1]:
        return by_threads[counts[0] if threads <= counts[0] else counts[-1]]
    hi = next(n for n in counts if n >= threads)
    lo = max(n for n in counts if n <= threads)
    if hi == lo:
        return by_threads[lo]
    w = (math.log(threads) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return by_threads[lo] * (1 - w) + by_threads[hi] * w


def quant_factor(type_name: str, threads: int = 16) -> QuantFactor:
    """The factor of one ggml type (by ggml_type_name, e.g. "iq3_xxs", "q4_K") at a thread count: measured, else the
    table's, else 1 (bytes only)."""
    measured, source = first_hand()
    if type_name in measured:
        return QuantFactor(type_name, _at_threads(measured[type_name], threads), source)
    row = _table()["factors"].get(type_name)
    if row is None:
        return QuantFactor(type_name, 1.0, BYTES_ONLY)
    return QuantFactor(type_name, float(row["factor"]), row["source"])


@lru_cache(maxsize=256)  # read by every CPU-path term of every fit trial
def expert_quant_factor(model: ModelSpec, threads: int = 16) -> float:
    """The rate of a byte of the model's experts relative to q4_K: total bytes over the time each type's bytes take
    (per token every expert tensor's slice is read, so the slices' bytes weigh each type)."""
    by_type: dict[str, float] = {}
    for layer in model.layers:
        for tensor in layer.experts:
            by_type[tensor.type_name] = by_type.get(tensor.type_name, 0.0) + tensor.expert_bytes
    total = sum(by_type.values())
    if not total:
        return 1.0
    return total / sum(b / quant_factor(t, threads).factor for t, b in by_type.items())


def expert_quant_factors(model: ModelSpec, threads: int = 16) -> tuple[QuantFactor, ...]:
    """The factor of each expert type the model has (for a page or a report to say which were measured)."""
    names = dict.fromkeys(t.type_name for layer in model.layers for t in layer.experts)
    return tuple(quant_factor(name, threads) for name in names)
