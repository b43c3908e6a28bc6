"""Read llama-server / llama-cli logs: what the MoE cache really did, run by run.

Formats mirror llama.cpp b11549 (docs/llamacpp-cache.md section 9). Lines may carry
the `M.SS.mmm.uuu L ` prefix or not, ANSI colours, CRLF; other components interleave; a file may
hold several runs. The parser streams the file and keeps only the facts it extracts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gguf import Keys

from moe_model.errors import LogError
from moe_model.limits import (
    MAX_ALERT_CHARS,
    MAX_LOG_ALERTS,
    MAX_LOG_CLOCK_BACKSTEPS,
    MAX_LOG_RUNS,
    shown,
)
from moe_model.readers.cache_lines import OtherCacheLines
from moe_model.readers.log_numbers import log_float, log_int
from moe_model.readers.log_source import log_lines

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) ([IWEDT]) ")
# start markers in the order one run prints them: a marker at or before the last one seen opens a new run
_RUN_STARTS = (
    re.compile(r"llama_server: initializing"),
    re.compile(r"common_params_print_info: build|^main: build = |^build: \d+"),
    re.compile(r"^main: llama backend init"),
    re.compile(r"common_init_: fitting params to device memory"),
    re.compile(r"llama_model_loader: loaded meta data"),
)
_INIT_FAILED = "failed to initialize the context: "
_BUILD = re.compile(r"build(?::| =)? (\d{1,9}) \(")  # build: 4524 (6171c9d2), main: build = ..., build 0 (unknown)
_KV = re.compile(r"llama_model_loader: - kv\s+\d+:\s+(\S+)\s+\S+\s+= (.*)$")
_INFO = re.compile(
    r"print_info: (n_layer|n_expert|n_expert_used|n_ff_exp|n_embd|model params|general\.name|arch|file type|file size)"
    r"\s*= (.*)$"
)
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_MODEL_BUF = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_KV_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_COMPUTE_BUF = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_CTX = re.compile(r"llama_context: (n_seq_max|n_ctx|n_batch|n_ubatch)\s+= (\d+)")
_FLASH_ATTN = re.compile(r"llama_context: flash_attn\s+= (\w+)")
_DEVICE = re.compile(r"impl:\s+(\S+) MoE cache size =\s+([\d.]+) MiB for ([\d.]+) MiB of host experts")
_GROUP = re.compile(r"impl:\s+(\d+) layers, (\S+):\s+(\d+) slots \(([\d.]+)%\)")
_STATS = re.compile(
    r"llama_moe_cache: (ubatch <= 8|ubatch  > 8): hits = (\d+), misses = (\d+), "
    r"hit rate = ([\d.]+)%, uploaded = ([\d.]+) MiB"
)
_COPIED = re.compile(r"llama_moe_cache: large batches: (\d+) experts copied from the cache, ([\d.]+) MiB")
# the qvac-fabric fork: the same --moe-cache-mib flag, its own cache (tetherto/qvac-fabric-llm.cpp)
_FORK_AUTO = re.compile(r"common_params_fit_impl: automatic MoE cache = ([\d.]+) MiB \((\d+)% of ([\d.]+) MiB")
_FORK_CACHE = re.compile(r"llama_moe_cache:\s+(\S+) MoE cache size =\s+([\d.]+) MiB, slots = (\d+)")
MAINLINE, FORK = "mainline", "qvac-fabric fork"
# b12170+'s own start-up and teardown lines are not known (its release notes: "display the cache size in token worth
# count"): a llama_moe_cache line of another form is read for what it shows, kept apart from b11549's
_TIMING = re.compile(
    r"print_timing: id\s+(\d+) \| task (-?\d+) \| +(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+) tokens"
)
_PERF = re.compile(r"llama_perf_context_print:\s+(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+) (?:tokens|runs)")
_GPU = re.compile(r"(?:using device (CUDA\d+) \(([^)]+)\)|- (CUDA\d+)\s+: (.+?) \((\d+) MiB)")
_COMMAND = re.compile(r"(?:^|[\s$>])((?:\S*/)?llama-(?:server|cli|completion)\s.*)$")
_WARN_NOT_CACHED = "MoE cache budget is too small for"
_WARN_NO_HOST = "no layer has all of its experts in host memory"
_ERR_TOO_SMALL = "MoE cache is too small to hold the experts of one token"
_MARKERS = (
    "llama_model_loader",
    "print_info",
    "load_tensors",
    "llama_context",
    "llama_kv_cache",
    "impl:",
    "llama_moe_cache",
    "srv ",
    "slot ",
    "common_",
    "sched_reserve",
    "llama_perf",
    "main: ",
    "build:",
)
# a line is looked at further only if it mentions one of these (one C-speed search per line)
_INTERESTING = re.compile(
    r"llama_model_loader|print_info|load_tensors|llama_context|llama_kv_cache|impl:|llama_moe_cache|print_timing|"
    r"llama_perf|sched_reserve|failed|error|ERROR|GGML_ABORT|llama_server|common_params_print_info|build|llama-|"
    r"CUDA|verbosity|srv |main: |automatic MoE cache"
)
_KV_NAMES = {  # GGUF keys (with their {arch} placeholder) the loader logs, and the model fields they fill
    Keys.LLM.BLOCK_COUNT: "n_layer",
    Keys.LLM.EXPERT_COUNT: "n_expert",
    Keys.LLM.EXPERT_USED_COUNT: "n_expert_used",
    Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: "n_ff_exp",
    Keys.LLM.EMBEDDING_LENGTH: "n_embd",
    Keys.General.ARCHITECTURE: "architecture",
    Keys.General.NAME: "name",
}
_INFO_NAMES = {
    "n_layer": "n_layer",
    "n_expert": "n_expert",
    "n_expert_used": "n_expert_used",
    "n_ff_exp": "n_ff_exp",
    "n_embd": "n_embd",
    "model params": "params",
    "general.name": "name",
    "arch": "architecture",
    "file type": "file_type",
    "file size": "file_size",
}


@dataclass(frozen=True)
class DeviceCache:
    name: str
    cache_mib: float
    host_experts_mib: float
    mib_only: bool = False  # the line ends at "of host experts", b11549's form (later builds add a token count)


@dataclass(frozen=True)
class GroupLine:
    n_layers: int
    type: str
    n_slots: int
    percent: float


@dataclass(frozen=True)
class LoggedStats:
    """One teardown line, as printed."""

    hits: int
    misses: int
    hit_rate: float | None  # fraction, from the counts; None when there were none
    uploaded_mib: float


@dataclass(frozen=True)
class Timing:
    """One finished request (server) or the run's totals (llama-cli)."""

    slot: int
    task: int
    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    decode_tokens: int = 0
    decode_ms: float = 0.0

    @property
    def prompt_tps(self) -> float | None:
        return 1000 * self.prompt_tokens / self.prompt_ms if self.prompt_ms else None

    @property
    def decode_tps(self) -> float | None:
        return 1000 * self.decode_tokens / self.decode_ms if self.decode_ms else None


@dataclass
class LogRun:
    """Everything one run of a llama.cpp program logged about the model, placement and cache."""

    index: int
    program: str = "unknown"
    command: str | None = None
    model: dict = field(default_factory=dict)
    placement: dict = field(default_factory=dict)
    devices: list[DeviceCache] = field(default_factory=list)
    groups: list[GroupLine] = field(default_factory=list)
    small: LoggedStats | None = None
    large: LoggedStats | None = None
    copied_experts: int = 0
    copied_mib: float = 0.0
    timings: list[Timing] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    n_lines: int = 0
    n_info_lines: int = 0
    verbosity: int | None = None
    build: int | None = None  # llama.cpp's build number (`build: 4524 (6171c9d2)`); None when unlogged or 0
    alerts_left_out: int = 0  # warning and error lines past MAX_LOG_ALERTS of each, counted only
    engine: str = MAINLINE  # FORK when the qvac-fabric fork's cache lines appear
    fork_cache: dict = field(default_factory=dict)  # the fork's own cache lines (its automatic size, its slots)
    other_cache: OtherCacheLines | None = None  # llama_moe_cache lines of an unknown form (b12170+), read apart

    @property
    def starts(self) -> bool:
        return not any(e.startswith("failed to create context") for e in self.errors)

    @property
    def has_stats(self) -> bool:
        other = self.other_cache is not None and self.other_cache.hits + self.other_cache.misses > 0
        return self.small is not None or self.large is not None or self.copied_experts > 0 or other

    @property
    def decode_tokens(self) -> int:
        return sum(t.decode_tokens for t in self.timings)

    @property
    def decode_stats(self) -> LoggedStats | None:
        """The "ubatch <= 8" teardown line, else the hits and misses of lines of an unknown form (b12170+'s), never
        the two added."""
        other = self.other_cache
        if self.small is not None or other is None or not other.hits + other.misses:
            return self.small
        return LoggedStats(other.hits, other.misses, other.hit_rate, 0.0)

    def flag(self, *names: str) -> str | None:
        """A flag's value from the logged command line, if the log shows one."""
        if not self.command:
            return None
        parts = self.command.split()
        for i, part in enumerate(parts):
            for name in names:
                if part == name and i + 1 < len(parts):
                    return parts[i + 1]
                if part.startswith(name + "="):
                    return part.split("=", 1)[1]
        return None

    def notes(self) -> list[str]:
        """What the log cannot tell, and why (verbosity, shutdown, cumulative counts)."""
        out = []
        if self.n_info_lines == 0 or (not self.model and not self.devices):
            out.append(
                "no libllama INFO lines: start llama-server with -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4) "
                "to log the cache size, the slots and, at shutdown, the hit rates"
            )
        elif not self.devices and self.starts:
            out.append(
                "no MoE cache lines: the cache was off (no --moe-cache-mib, or no layer had all of its "
                "experts in host memory: add --cpu-moe or --n-cpu-moe)"
            )
        if self.devices and self.starts and not self.has_stats:
            out.append(
                "no hit-rate statistics: llama.cpp prints them only when the context is destroyed at a "
                "clean shutdown (Ctrl-C / SIGTERM), not when the server is killed or crashes"
            )
        if self.has_stats and self.program == "llama-server":
            out.append("the statistics are cumulative over the server's whole life: the warm-up and every request")
        if self.other_cache is not None and (note := self.other_cache.note()):
            out.append(note)
        if self.alerts_left_out:
            out.append(
                f"{self.alerts_left_out:,} more warning or error lines are not listed "
                f"(the first {MAX_LOG_ALERTS} of each are)"
            )
        return out

    def as_dict(self) -> dict:
        stats = {
            name: None
            if st is None
            else {"hits": st.hits, "misses": st.misses, "hit_rate": st.hit_rate, "uploaded_mib": st.uploaded_mib}
            for name, st in (("small", self.small), ("large", self.large))
        }
        stats["copied"] = {"experts": self.copied_experts, "mib": self.copied_mib}
        return {
            "index": self.index,
            "program": self.program,
            "build": self.build,
            "command": self.command,
            "starts": self.starts,
            "model": self.model,
            "placement": self.placement,
            "devices": [
                {"name": d.name, "cache_mib": d.cache_mib, "host_experts_mib": d.host_experts_mib} for d in self.devices
            ],
            "groups": [
                {"n_layers": g.n_layers, "type": g.type, "n_slots": g.n_slots, "percent": g.percent}
                for g in self.groups
            ],
            "stats": stats,
            "timings": [
                {
                    "slot": t.slot,
                    "task": t.task,
                    "prompt_tokens": t.prompt_tokens,
                    "prompt_tps": t.prompt_tps,
                    "decode_tokens": t.decode_tokens,
                    "decode_tps": t.decode_tps,
                }
                for t in self.timings
            ],
            "warnings": self.warnings,
            "errors": self.errors,
            "alerts_left_out": self.alerts_left_out,
            "notes": self.notes(),
            "engine": self.engine,
            "fork_cache": self.fork_cache,
            "other_cache": self.other_cache.as_dict() if self.other_cache else None,
        }


def _clean(raw: str) -> tuple[str, str | None, float | None]:
    """(message, level letter or None, seconds since logger start or None) of one raw line."""
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    line = raw.rstrip("\r\n")
    if not line[:1].isdigit() or (match := _PREFIX.match(line)) is None:
        return line.strip(), None, None
    minutes, seconds, ms, us = match.group(1, 2, 3, 4)
    return line[match.end() :], match.group(5), int(minutes) * 60 + int(seconds) + int(ms) / 1e3 + int(us) / 1e6


def _start_rank(msg: str) -> int | None:
    return next((i for i, marker in enumerate(_RUN_STARTS) if marker.search(msg)), None)


class _RunParser:
    """Feeds lines into the current LogRun; one method per family of lines."""

    def __init__(self) -> None:
        self.runs: list[LogRun] = []
        self.init_error: str | None = None  # a context failure not yet known to be a -fit trial
        self.run = self._new_run()
        self.last_time = -1.0
        self.pending_timing: dict[tuple[int, int], dict] = {}
        self.start_rank = -1  # the latest start marker seen in the current run
        self.has_body = False  # the current run has a line other than its start markers
        self.backsteps = 0  # the logger's clock going back within the current run (without opening a new one)

    def _new_run(self) -> LogRun:
        if len(self.runs) >= MAX_LOG_RUNS:  # refused while streaming: every run is rendered and cross-checked
            raise LogError(f"the log holds more than {MAX_LOG_RUNS:,} runs, this tool's limit: split it")
        self._commit_init_error()
        run = LogRun(index=len(self.runs))
        self.runs.append(run)
        self.pending_timing = {}
        self.start_rank = -1
        self.last_time = -1.0
        self.has_body = False
        self.backsteps = 0
        return run

    def _commit_init_error(self) -> None:
        """A context failure not followed by common_fit_params was the real load's: the run did not start."""
        if self.init_error is not None and not any(e.startswith("failed to create context") for e in self.run.errors):
            self.run.errors.append(f"failed to create context: {shown(self.init_error, MAX_ALERT_CHARS)}")
        self.init_error = None

    def finish(self) -> list[LogRun]:
        self._commit_init_error()
        return [run for run in self.runs if run.n_lines]

    def _opens_run(self, rank: int | None, seconds: float | None) -> bool:
        """One boundary, one run: a start marker at or before the latest of this run, or the logger's clock going
        back (a new process), once the run has more than start lines (a build line, then a restarted clock and
        the server's first line, are the start of one run)."""
        if not self.has_body:
            return False
        restarted = seconds is not None and seconds + 0.5 < self.last_time
        return restarted or (rank is not None and rank <= self.start_rank)

    def _count_backstep(self, seconds: float) -> None:
        """Refuse a run whose clock goes back more than MAX_LOG_CLOCK_BACKSTEPS times: two processes wrote the file at
        once, and which line is whose cannot be told (their lines were read into one run, a mix of both)."""
        self.backsteps += seconds < self.last_time
        if self.backsteps > MAX_LOG_CLOCK_BACKSTEPS:
            raise LogError(
                f"the lines of two llama.cpp processes are interleaved in this log (the logger's clock goes back "
                f"{self.backsteps} times in run {self.run.index + 1}): give each server its own log file "
                "(--log-file) and read them one by one"
            )

    def feed(self, raw: str) -> None:
        msg, level, seconds = _clean(raw)
        if not msg:
            return
        interesting = _INTERESTING.search(msg) is not None  # most lines of a long log: nothing to extract
        rank = _start_rank(msg) if interesting else None
        run = self.run = self._new_run() if self._opens_run(rank, seconds) else self.run
        if seconds is not None:
            self._count_backstep(seconds)
            self.last_time = seconds
        self.start_rank = max(self.start_rank, -1 if rank is None else rank)
        self.has_body |= rank is None
        run.n_lines += 1
        if level == "I":
            run.n_info_lines += 1
        if not interesting:
            return
        if level is None and any(m in msg for m in ("llama_model_loader", "print_info", "load_tensors")):
            run.n_info_lines += 1
        if run.build is None and "build" in msg and (m := _BUILD.search(msg)) and int(m.group(1)):
            run.build = int(m.group(1))  # llama.cpp prints build 0 when built without git: unknown
        if self.init_error is not None and _INIT_FAILED not in msg:
            if "common_fit_params" in msg:
                self.init_error = None  # a -fit trial failed; the real load comes next
            else:
                self._commit_init_error()
        if "llama_server" in msg or msg.startswith("srv "):
            run.program = "llama-server"
        self._model(msg)
        self._placement(msg)
        self._cache(msg, level)
        self._timings(msg)
        self._command(msg)

    def _model(self, msg: str) -> None:
        if "llama_model_loader: - kv" in msg and (m := _KV.search(msg)):
            key, value = m.group(1), m.group(2).strip()
            template = key if key.startswith("general.") else "{arch}." + key.split(".", 1)[-1]
            name = _KV_NAMES.get(template)
            if name:
                self.run.model.setdefault(name, _value(value, name))
        elif "print_info:" in msg and (m := _INFO.search(msg)):
            name = _INFO_NAMES[m.group(1)]
            self.run.model[name] = _value(m.group(2).strip(), name)

    def _placement(self, msg: str) -> None:
        p = self.run.placement
        if (m := _OFFLOADED.search(msg)) is not None:
            p["offloaded_layers"], p["total_layers"] = (
                log_int(m.group(1), "offloaded_layers"),
                log_int(m.group(2), "total_layers"),
            )
        elif (m := _MODEL_BUF.search(msg)) is not None:
            p.setdefault("model_buffers_mib", {})[m.group(1)] = log_float(m.group(2), "model buffer MiB")
        elif (m := _KV_BUF.search(msg)) is not None:
            p.setdefault("kv_buffers_mib", {})[m.group(1)] = log_float(m.group(2), "KV buffer MiB")
        elif (m := _COMPUTE_BUF.search(msg)) is not None:
            p.setdefault("compute_buffers_mib", {})[m.group(1)] = log_float(m.group(2), "compute buffer MiB")
        elif (m := _CTX.search(msg)) is not None:
            p[m.group(1)] = log_int(m.group(2), m.group(1))
        elif (m := _FLASH_ATTN.search(msg)) is not None:
            p["flash_attn"] = "off" if m.group(1) == "disabled" else "on"
        elif "CUDA" in msg and (m := _GPU.search(msg)):
            p.setdefault("gpu", shown((m.group(2) or m.group(4)).strip()))
            if m.group(5):
                p.setdefault("gpu_vram_mib", log_int(m.group(5), "gpu_vram_mib"))
        elif "tensor overrides to CPU are used with mmap" in msg:
            p["experts_mmap"] = True
        elif "verbosity = " in msg and (v := re.search(r"verbosity = (\d+)", msg)):
            self.run.verbosity = log_int(v.group(1), "verbosity")

    def _fork(self, msg: str) -> bool:
        """The qvac-fabric fork's cache lines: recorded apart, never read as mainline's."""
        if (m := _FORK_AUTO.search(msg)) is not None:
            self.run.fork_cache |= {"auto_mib": log_float(m.group(1), "cache MiB"), "percent": int(m.group(2))}
            self.run.fork_cache["expert_mib"] = log_float(m.group(3), "expert MiB")
        elif (m := _FORK_CACHE.search(msg)) is not None:
            self.run.fork_cache |= {
                "buffer": m.group(1),
                "cache_mib": log_float(m.group(2), "cache MiB"),
                "slots": int(m.group(3)),
            }
        else:
            return False
        self.run.engine = FORK
        return True

    def _cache(self, msg: str, level: str | None) -> None:
        run = self.run
        if self._fork(msg):
            return
        if "impl:" in msg:
            if (m := _DEVICE.search(msg)) is not None:
                mib_only = not msg[m.end() :].strip()
                run.devices.append(
                    DeviceCache(
                        m.group(1), log_float(m.group(2), "cache MiB"), log_float(m.group(3), "expert MiB"), mib_only
                    )
                )
            elif (m := _GROUP.search(msg)) is not None:
                n_layers, n_slots = log_int(m.group(1), "cache group layers"), log_int(m.group(3), "cache group slots")
                run.groups.append(
                    GroupLine(n_layers, shown(m.group(2)), n_slots, log_float(m.group(4), "cache group share"))
                )
            elif _WARN_NOT_CACHED in msg or _WARN_NO_HOST in msg:
                self._alert(run.warnings, msg.split("impl:", 1)[1].strip())  # two processes' writes may cut a space
        elif "llama_moe_cache:" in msg:
            if (m := _STATS.search(msg)) is not None:
                hits, misses = log_int(m.group(2), "hits"), log_int(m.group(3), "misses")
                rate = hits / (hits + misses) if hits + misses else None  # a cache that was never looked up
                stats = LoggedStats(hits, misses, rate, log_float(m.group(5), "uploaded MiB"))
                if m.group(1) == "ubatch <= 8":
                    run.small = stats
                else:
                    run.large = stats
            elif (m := _COPIED.search(msg)) is not None:
                run.copied_experts, run.copied_mib = (
                    log_int(m.group(1), "copied experts"),
                    log_float(m.group(2), "copied MiB"),
                )
            else:
                self.run.other_cache = self.run.other_cache or OtherCacheLines()
                self.run.other_cache.read(msg.split("llama_moe_cache:", 1)[1].strip(), log_int, log_float)
        elif _INIT_FAILED in msg:
            self.init_error = msg.split(_INIT_FAILED, 1)[1].strip()
        elif "failed to create context" in msg or "failed to init" in msg:
            if not any(e.startswith("failed to create context") for e in run.errors):
                run.errors.append("failed to create context")
        elif (level == "E" or "GGML_ABORT" in msg or "error:" in msg.lower()[:40]) and "common_fit_params" not in msg:
            self._alert(run.errors, msg)  # fit trials report their own errors; the real load repeats them

    def _alert(self, alerts: list[str], msg: str) -> None:
        """Keep a run's first MAX_LOG_ALERTS warnings (or errors), each cut to MAX_ALERT_CHARS; count the rest."""
        if len(alerts) < MAX_LOG_ALERTS:
            alerts.append(shown(msg, MAX_ALERT_CHARS))
        else:
            self.run.alerts_left_out += 1

    def _timings(self, msg: str) -> None:
        if "print_timing" in msg and (m := _TIMING.search(msg)):
            key = (log_int(m.group(1), "slot id"), log_int(m.group(2), "task id"))
            entry = self.pending_timing.setdefault(key, {})
            kind = "prompt" if m.group(3) == "prompt eval" else "decode"
            entry[kind] = (log_float(m.group(4), "time ms"), log_int(m.group(5), "tokens"))
            if kind == "decode":
                self._add_timing(key, entry)
        elif "llama_perf_context_print" in msg and (m := _PERF.search(msg)):
            self.run.program = "libllama program" if self.run.program == "unknown" else self.run.program
            entry = self.pending_timing.setdefault((0, -1), {})
            kind = "prompt" if m.group(1) == "prompt eval" else "decode"
            entry[kind] = (log_float(m.group(2), "time ms"), log_int(m.group(3), "tokens"))
            if kind == "decode":
                self._add_timing((0, -1), entry)

    def _add_timing(self, key: tuple[int, int], entry: dict) -> None:
        prompt_ms, prompt_tokens = entry.get("prompt", (0.0, 0))
        decode_ms, decode_tokens = entry["decode"]
        self.run.timings.append(Timing(key[0], key[1], prompt_tokens, prompt_ms, decode_tokens, decode_ms))
        self.pending_timing.pop(key, None)

    def _command(self, msg: str) -> None:
        if self.run.command is None and "llama-" in msg and (m := _COMMAND.search(msg)):
            self.run.command = shown(m.group(1).strip(), MAX_ALERT_CHARS)
            self.run.program = m.group(1).split()[0].rsplit("/", 1)[-1]


def _value(text: str, name: str) -> int | str:
    """A logged model fact: an integer in its bound, or text as quoted back (cut)."""
    return log_int(text, name) if text.isdigit() else shown(text)


def parse_lines(lines: Iterable[str]) -> list[LogRun]:
    parser = _RunParser()
    seen_llama = 0
    for line in lines:
        parser.feed(line)
        if seen_llama < 3 and any(marker in line for marker in _MARKERS):
            seen_llama += 1
    if seen_llama == 0:
        raise LogError("this is not a llama.cpp log: none of its lines come from llama-server, llama-cli or libllama")
    runs = parser.finish()
    if not any(
        run.model or run.placement or run.devices or run.has_stats or run.timings or run.errors or run.fork_cache
        for run in runs
    ):
        raise LogError(
            "this llama.cpp log holds no run: no model load, placement, cache, statistics, timing or error lines"
        )
    return runs


def parse_log(source: str | Path | bytes | BinaryIO) -> list[LogRun]:
    """Every run in a llama.cpp log (path, bytes or binary file object), in order."""
    return parse_lines(log_lines(source))
