"""The host record: one model timed on the user's own CPU (by `record`, or from `llama-bench -ngl 0`).

It is what a user has before buying a card: the CPU-only decode and prompt speed of their model and quantization
on their CPU at a thread count, and the host's facts (CPU, cores, RAM, the drive holding the model). The time model
calibrates its host side (the CPU expert path, the dense path, fixed costs) from it.

The file is JSON, written by `python -m moe_model record --host-out HOST.json`:

    {"format": "moe-cache-explorer-host", "version": 1, "source": "record",
     "model": {"name": ..., "file_bytes": ..., "expert_types": ["q4_K", ...]},
     "cpu": {"model": ..., "cores": 16, "threads": 16},
     "memory": {"ram_gib": 125.0, "free_gib": 100.0, "copy_gbs": 9.6},
     "drive": {"name": "nvme0n1", "read_gbs": 3.1, "read_cold": true},
     "runtime": {"name": "llama-cpp-python 0.3.36", "llama_cpp": "commit 0c1e570 (...)"},
     "speed": {"decode_tps": 40.1, "decode_tokens": 64, "decode_depth_tokens": 200,
               "prompt_tps": 150.0, "prompt_tokens": 512, "n_ubatch": 512}}

`ram_gib`, `free_gib`, `name`, `read_gbs` and `llama_cpp` may be null (not known). `copy_gbs` (one core copying
the model's mmap'd bytes, record/copy_rate.py: the host half of a pageable upload) may be null or absent (records
written before it was measured). `read_cold` (an optional field added after version 1's first records, which lack
it: null) says how `record --measure-drive` went: true, the model file's pages were out of the page cache when
`read_gbs` was timed (a cold read); false, they stayed in it, so no rate is given; null, not measured. `llama_cpp` is
llama-bench's build ("b7150 (0104b151)") or, for `record`, the commit the llama-cpp-python wheel's libraries report
(they expose no build number).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moe_model.errors import MoeModelError, one_line
from moe_model.limits import MAX_ECHO_CHARS, MAX_HOST_RECORD_BYTES, shown
from moe_model.readers.files import open_regular

FORMAT = "moe-cache-explorer-host"
VERSION = 1
SOURCES = ("record", "llama-bench")
MAX_TPS = 1_000_000.0  # tokens/s: more than any CPU computes a MoE model at
MAX_RATE_GBS = 2000.0  # GB/s: a drive or memory read faster than any host's


class HostRecordError(MoeModelError):
    """A host record that `record` did not write, or whose values are out of type or range."""


@dataclass(frozen=True)
class HostRecord:
    """One model timed on one CPU: speeds in tokens/s, sizes in bytes or GiB, rates in GB/s."""

    source: str
    model_name: str
    model_file_bytes: int
    expert_types: tuple[str, ...]
    cpu_model: str
    cpu_cores: int
    threads: int
    decode_tps: float
    decode_tokens: int
    decode_depth_tokens: int
    prompt_tps: float
    prompt_tokens: int
    n_ubatch: int
    runtime: str
    llama_cpp: str | None = None
    ram_gib: float | None = None
    ram_free_gib: float | None = None
    drive: str | None = None
    drive_read_gbs: float | None = None
    copy_gbs: float | None = None  # one core copying the mmap'd model (record/copy_rate.py); optional, added later
    drive_read_cold: bool | None = None  # optional, added later: None in records without it

    def __post_init__(self) -> None:
        if self.drive_read_gbs is not None and self.drive_read_cold is False:
            raise HostRecordError("host record drive.read_gbs is given from a warm read (read_cold false): no rate")

    def as_dict(self) -> dict[str, Any]:
        """The JSON layout of the module docstring."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "model": {
                "name": self.model_name,
                "file_bytes": self.model_file_bytes,
                "expert_types": list(self.expert_types),
            },
            "cpu": {"model": self.cpu_model, "cores": self.cpu_cores, "threads": self.threads},
            "memory": {"ram_gib": self.ram_gib, "free_gib": self.ram_free_gib, "copy_gbs": self.copy_gbs},
            "drive": {"name": self.drive, "read_gbs": self.drive_read_gbs, "read_cold": self.drive_read_cold},
            "runtime": {"name": self.runtime, "llama_cpp": self.llama_cpp},
            "speed": {
                "decode_tps": self.decode_tps,
                "decode_tokens": self.decode_tokens,
                "decode_depth_tokens": self.decode_depth_tokens,
                "prompt_tps": self.prompt_tps,
                "prompt_tokens": self.prompt_tokens,
                "n_ubatch": self.n_ubatch,
            },
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, allow_nan=False) + "\n"


def read_host_record(source: str | Path | bytes) -> HostRecord:
    """A host record from a path or its bytes; anything else is one line (HostRecordError)."""
    raw = source if isinstance(source, bytes) else _read_bounded(source)
    if len(raw) > MAX_HOST_RECORD_BYTES:
        raise HostRecordError(f"a host record is at most {MAX_HOST_RECORD_BYTES:,} bytes; this one is larger")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise HostRecordError(f"not a host record (not JSON): {shown(one_line(err))}") from None
    return host_record_from_dict(data)


def host_record_from_dict(data: Any) -> HostRecord:
    """The record of a parsed JSON object, every field checked for type and range."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise HostRecordError(f"not a host record: the file does not say format {FORMAT!r} (write one with record)")
    if data.get("version") != VERSION:
        raise HostRecordError(f"host record version {shown(str(data.get('version')))} is not {VERSION}")
    g = _Getter(data)
    source = g.text("source")
    if source not in SOURCES:
        raise HostRecordError(f"host record source must be one of {', '.join(SOURCES)}, not {shown(source)}")
    return HostRecord(
        source=source,
        model_name=g.text("model", "name"),
        model_file_bytes=g.integer(("model", "file_bytes"), 1, 1 << 50),
        expert_types=g.texts("model", "expert_types"),
        cpu_model=g.text("cpu", "model"),
        cpu_cores=g.integer(("cpu", "cores"), 1, 65_536),
        threads=g.integer(("cpu", "threads"), 1, 65_536),
        decode_tps=g.number(("speed", "decode_tps"), MAX_TPS),
        decode_tokens=g.integer(("speed", "decode_tokens"), 1, 1 << 31),
        decode_depth_tokens=g.integer(("speed", "decode_depth_tokens"), 0, 1 << 31),
        prompt_tps=g.number(("speed", "prompt_tps"), MAX_TPS),
        prompt_tokens=g.integer(("speed", "prompt_tokens"), 1, 1 << 31),
        n_ubatch=g.integer(("speed", "n_ubatch"), 1, 1 << 31),
        runtime=g.text("runtime", "name"),
        llama_cpp=g.text("runtime", "llama_cpp", optional=True),
        ram_gib=g.number(("memory", "ram_gib"), 1 << 24, optional=True),
        ram_free_gib=g.number(("memory", "free_gib"), 1 << 24, optional=True, zero=True),
        drive=g.text("drive", "name", optional=True),
        drive_read_gbs=g.number(("drive", "read_gbs"), MAX_RATE_GBS, optional=True),
        copy_gbs=g.number(("memory", "copy_gbs"), MAX_RATE_GBS, optional=True),
        drive_read_cold=g.boolean("drive", "read_cold"),
    )


def _read_bounded(path: str | Path) -> bytes:
    with open_regular(path, "host record", HostRecordError) as f:
        return f.read(MAX_HOST_RECORD_BYTES + 1)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a host record holds")


class _Getter:
    """Fields of the nested JSON, each checked; a wrong one names its path."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def _get(self, path: tuple[str, ...], optional: bool) -> Any:
        node: Any = self.data
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None and not optional:
            raise HostRecordError(f"the host record lacks {'.'.join(path)}")
        return node

    def text(self, *path: str, optional: bool = False) -> Any:
        value = self._get(path, optional)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise HostRecordError(f"host record {'.'.join(path)} must be a non-empty text")
        return value.strip()[:MAX_ECHO_CHARS]

    def boolean(self, *path: str) -> bool | None:
        """An optional true or false (null or absent: not known)."""
        value = self._get(path, True)
        if value is not None and not isinstance(value, bool):
            raise HostRecordError(f"host record {'.'.join(path)} must be true, false or null")
        return value

    def texts(self, *path: str) -> tuple[str, ...]:
        value = self._get(path, False)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or len(value) > 64:
            raise HostRecordError(f"host record {'.'.join(path)} must be a list of type names")
        return tuple(v[:MAX_ECHO_CHARS] for v in value)

    def integer(self, path: tuple[str, ...], lo: int, hi: int) -> int:
        value = self._get(path, False)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise HostRecordError(f"host record {'.'.join(path)} must be a whole number from {lo:,} to {hi:,}")
        return value

    def number(self, path: tuple[str, ...], hi: float, optional: bool = False, zero: bool = False) -> Any:
        value = self._get(path, optional)
        if value is None:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not (value >= 0 if zero else value > 0) or value > hi:
            low = "0" if zero else "above 0"
            raise HostRecordError(f"host record {'.'.join(path)} must be a number {low} and at most {hi:g}")
        return float(value)
