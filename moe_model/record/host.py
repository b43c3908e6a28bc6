"""The host record of a recording: the CPU's measured speed on this model, one core's copy rate of its mmap'd bytes
(record/copy_rate.py), and the host's facts (CPU model, physical cores, RAM, the drive holding the model), read from
/proc and /sys where Linux has them."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from moe_model.readers.gguf import read_model_headers, shard_sources
from moe_model.readers.host_record import HostRecord
from moe_model.readers.model_spec import ModelSpec, spec_from_headers
from moe_model.record.copy_rate import copy_gbs, expert_slice_bytes
from moe_model.record.drive import DriveRead
from moe_model.record.session import Recording

GIB = 1024**3


def host_record(
    model: ModelFiles,
    recording: Recording,
    threads: int,
    runtime_version: str,
    llama_cpp: str | None = None,
    drive_read: DriveRead | None = None,
) -> HostRecord | None:
    """The host record of a recording, with the llama.cpp the runtime vendors (runtime.vendored_llama_cpp) and the
    drive's timed read where one was made (drive.measure_drive); None when it timed no prompt or no generation token
    after the first."""
    t = recording.timings
    if not (t.prompt_tokens and t.prompt_s > 0 and t.decode_tokens and t.decode_s > 0):
        return None
    spec = model.spec
    ram, free = memory_gib()
    return HostRecord(
        source="record",
        model_name=spec.name,
        model_file_bytes=sum(os.path.getsize(p) for p in model.shards),
        expert_types=expert_types(spec),
        cpu_model=cpu_model(),
        cpu_cores=physical_cores(),
        threads=threads,
        decode_tps=t.decode_tokens / t.decode_s,
        decode_tokens=t.decode_tokens,
        decode_depth_tokens=round(t.decode_depth_sum / t.decode_tokens),
        prompt_tps=t.prompt_tokens / t.prompt_s,
        prompt_tokens=t.prompt_tokens,
        n_ubatch=recording.n_ubatch,
        runtime=f"llama-cpp-python {runtime_version}",
        llama_cpp=llama_cpp,
        ram_gib=ram,
        ram_free_gib=free,
        drive=drive_of(Path(model.shards[0])),
        drive_read_gbs=None if drive_read is None else drive_read.read_gbs,
        copy_gbs=copy_gbs(max(model.shards, key=os.path.getsize), expert_slice_bytes(spec)),
        drive_read_cold=None if drive_read is None else drive_read.cold,
    )


@dataclass(frozen=True)
class ModelFiles:
    """The model as the project's GGUF reader sees it, and every shard's path (one for a single file)."""

    spec: ModelSpec
    shards: tuple[str, ...]


def model_files(model_path: str | Path) -> ModelFiles:
    """Read before llama.cpp loads the model: a file the reader refuses is one line before minutes of loading."""
    headers = read_model_headers(str(model_path))
    shards = shard_sources(model_path, len(headers)) if len(headers) > 1 else [str(model_path)]
    return ModelFiles(spec_from_headers(headers), tuple(shards))


def expert_types(spec: ModelSpec) -> tuple[str, ...]:
    """The ggml type names of the ffn_*_exps tensors, each once, in the order the layers hold them."""
    names = [t.type_name for layer in spec.layers for t in layer.experts]
    return tuple(dict.fromkeys(names))


def cpu_model() -> str:
    for line in _lines("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def physical_cores() -> int:
    """Distinct (package, core) pairs of /proc/cpuinfo; the logical count where those are not given."""
    cores, package = set(), "0"
    for line in _lines("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        if key.strip() == "physical id":
            package = value.strip()
        elif key.strip() == "core id":
            cores.add((package, value.strip()))
    return len(cores) or os.cpu_count() or 1


def memory_gib() -> tuple[float | None, float | None]:
    """MemTotal and MemAvailable of /proc/meminfo in GiB (None where not read)."""
    values = {}
    for line in _lines("/proc/meminfo"):
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("MemTotal", "MemAvailable") and parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024 / GIB
    return values.get("MemTotal"), values.get("MemAvailable")


def drive_of(path: Path) -> str | None:
    """The block device (whole disk) holding `path`: its mount in /proc/mounts, the partition's parent in /sys;
    None for a file system on no block device (overlay, tmpfs, network)."""
    real, best = str(path.resolve()), ("", "")
    for line in _lines("/proc/mounts"):
        parts = line.split()
        if len(parts) >= 2 and _under(real, parts[1]) and len(parts[1]) >= len(best[1]):
            best = (parts[0], parts[1])
    device = Path(best[0]).name if best[0].startswith("/dev/") else ""
    sys_block = Path("/sys/class/block") / device
    if not device or not sys_block.exists():
        return None
    parent = sys_block.resolve().parent
    return parent.name if (sys_block / "partition").exists() else device


def _under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []


def largest_shard(model: ModelFiles) -> str:
    """The shard whose read times the drive best: the largest (a split model's first holds little but its header)."""
    return max(model.shards, key=os.path.getsize)
