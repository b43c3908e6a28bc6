"""A host record calibrates the machine's host side: the CPU expert rate, the threads, the RAM, the drive.

A host record (readers/host_record.py) is the user's model run wholly on their CPU (llama-cpp-python, or
`llama-bench -ngl 0`) at `threads` threads: decode t/s at a context depth, prompt t/s in ubatches of n_ubatch.
In that run the CPU computes everything a token needs, so its decode time splits as the time model prices the CPU
path (a model; the decomposition is in docs/models-and-fits.md):

    1 / decode_tps = fixed + (experts / quant + dense + kv) / cpu_rate

    experts  the expert bytes one token reads: k experts of every MoE layer (ModelSpec slot bytes x n_expert_used)
    quant    the model's expert types' rate per byte relative to q4_K (speed/cpu_quant.py)
    dense    every layer's dense weights and the output head (the input embedding reads one row a token)
    kv       K and V up to the decode depth in every KV layer (f16, the recording's default)
    fixed    per token: each layer's CPU-only cost beside its weights (attention, router, norms, graph and thread
             syncs), measured first-hand per thread count (cpu_quant.cpu_layer_ms; else the fitted token_ms);
             neither `record` nor llama-bench times sampling

`cpu_rate` (GB/s of q4_K-equivalent bytes) is the one unknown: it becomes `Hardware.cpu_expert_gbs`, measured at the
record's threads (`cpu_expert_threads`; a server with other threads scales it as the time model's thread term does,
speed/rates.py). The record's thread count becomes the host's unless the user stated one; its RAM size, drive
read rate and one core's copy rate of the mmap'd model (`copy_gbs`, record/copy_rate.py: the host half of a
pageable upload, speed/rates.upload_gbs), where recorded, become the host's. The hardware carries `host_record`, so
the range drops the host parts the record settles (the CPU and the RAM kit: speed/host_parts.unknown_parts).

The prompt speed is not used: with a GPU, prompt ubatches of 32 tokens or more run on the GPU (the host experts are
uploaded), so the CPU's prompt rate is not a term of the time model; the record's prompt speed says how fast the
CPU alone would be. One decode speed cannot split the fixed cost from the rate, so the fixed cost is the one measured
first-hand on the lent machine's host (run11), a model for other CPUs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from moe_model.fits.calibration import CALIBRATION_JSON, TimeModel, default_time_model, load_calibration
from moe_model.readers.host_record import HostRecord, HostRecordError
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.cpu_quant import cpu_layer_ms, expert_quant_factor
from moe_model.speed.hardware import MACHINE_SETTINGS, Hardware
from moe_model.speed.rates import GB, TimeParams
from moe_model.speed.vram import kv_bytes_per_elem

HOST_SETTLED = ("cpu_expert_gbs",)  # the machine term a host record measures: `calibrate --host` fits the others
RECORD_KV_TYPE = "f16"  # llama-cpp-python and llama-bench keep K and V in f16 unless told otherwise
SIZE_TOLERANCE = 0.1  # a record of the same model: its file within 10 % of the header's tensor bytes
MIN_RATE_SHARE = 0.1  # the fixed cost may take at most 90 % of a recorded token's time


def token_bytes(model: ModelSpec, depth: int) -> tuple[float, float, float]:
    """Bytes the CPU reads for one decoded token of a CPU-only run at `depth`: experts, dense weights, K and V."""
    experts = float(sum(model.n_expert_used * layer.slot_bytes for layer in model.layers if layer.has_experts))
    dense = float(sum(layer.dense_bytes for layer in model.layers) + model.other_bytes - model.input_bytes)
    per_token = model.n_head_kv * (model.head_dim_k + model.head_dim_v) * kv_bytes_per_elem(RECORD_KV_TYPE)
    return experts, dense, float(per_token * depth * model.kv_layers)


def fixed_ms(model: ModelSpec, record: HostRecord, params: TimeParams) -> float:
    """The per-token cost that is not reading weights: every layer's measured CPU-only cost at the record's threads
    (cpu_quant.cpu_layer_ms), else the fitted per-ubatch cost. Neither `record` nor llama-bench times sampling."""
    per_layer = cpu_layer_ms(record.threads)
    return params.token_ms if per_layer is None else per_layer * model.n_layer


def recorded_cpu_gbs(model: ModelSpec, record: HostRecord, params: TimeParams) -> float:
    """The CPU rate (GB/s of q4_K-equivalent bytes) the record's decode speed implies (the module's decomposition)."""
    experts, dense, kv = token_bytes(model, record.decode_depth_tokens)
    work = experts / expert_quant_factor(model, record.threads) + dense + kv
    token_s = 1.0 / record.decode_tps
    reading_s = max(token_s - fixed_ms(model, record, params) / 1e3, MIN_RATE_SHARE * token_s)
    return work / reading_s / GB


def check_same_model(record: HostRecord, model: ModelSpec) -> None:
    """A record of another model would calibrate the wrong bytes: its expert types and size must match."""
    own = {t.type_name for layer in model.layers for t in layer.experts}
    if set(record.expert_types) != own:
        raise HostRecordError(
            f"the host record timed a model with expert types {', '.join(sorted(record.expert_types))}, "
            f"this model has {', '.join(sorted(own))}: record this model's file"
        )
    if abs(record.model_file_bytes / model.total_bytes - 1) > SIZE_TOLERANCE:
        raise HostRecordError(
            f"the host record timed a {record.model_file_bytes / 1e9:,.1f} GB file, this model's tensors are "
            f"{model.total_bytes / 1e9:,.1f} GB: record this model's file"
        )


def describe_record(record: HostRecord) -> str:
    """One line naming what measured the host (kept on the hardware, shown where the host's figures are)."""
    return (
        f"host record ({record.source}, {record.runtime}): {record.model_name} on {record.cpu_model}, "
        f"{record.threads} threads, decode {record.decode_tps:,.1f} t/s"
    )


def apply_host_record(
    hardware: Hardware, record: HostRecord, model: ModelSpec, params: TimeParams | None = None
) -> Hardware:
    """The machine with its host side measured by the record: the CPU expert rate at the record's threads, the
    threads (unless the user stated them), the RAM, the drive's read rate and the one-core copy rate where
    recorded. A record of another model is one line (HostRecordError)."""
    check_same_model(record, model)
    params = params or default_time_model().params
    host: dict = {}
    if "threads" not in hardware.host.stated:
        host["threads"] = record.threads
    if record.ram_gib is not None:
        host["ram_gib"] = record.ram_gib
    if record.drive_read_gbs is not None:
        host["disk_gbs"] = min(record.drive_read_gbs, MACHINE_SETTINGS["disk_gbs"].hi)
    if record.copy_gbs is not None and "copy_gbs" not in hardware.host.stated:
        host["copy_gbs"] = min(record.copy_gbs, MACHINE_SETTINGS["copy_gbs"].hi)
    return hardware.with_changes(
        cpu_expert_gbs=recorded_cpu_gbs(model, record, params),
        cpu_expert_threads=record.threads,
        host_record=describe_record(record),
        **host,
    )


def host_time_model(path: Path = CALIBRATION_JSON) -> TimeModel:
    """The time model a prediction with a host record uses: the same parameters, and the error left out of a fit
    that took the machine's host side from its record instead of its logs (`calibrate.py`'s `host_record`: the
    machines with a CPU recording of their own, each predicted by the fit without it). Where none was measured,
    the plain left-out error, and the source says so."""
    plain = default_time_model(path)
    measured = load_calibration(path).get("host_record")
    if not measured or not measured.get("points"):
        return replace(plain, source=plain.source + "; no host record's error measured yet: the plain one is used")
    return replace(
        plain,
        rel_error=measured["rel_error"],
        source=f"{plain.source}; with a host record ±{100 * measured['rel_error']:.0f} %, the 68th percentile over "
        f"{measured['points']} left-out points whose host side came from a CPU recording ({measured['about']})",
    )
