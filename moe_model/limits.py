"""Every cap on hostile or absurd input, in one place, each checked before any cast or allocation.

Values are far above what real MoE models and llama-server runs use, yet small enough that the
largest accepted input fits a 24 GiB machine shared by several users.
"""

from __future__ import annotations

import os

from moe_model.errors import MoeModelError

# --- GGUF headers ---
MAX_LAYERS = 1024  # real MoE models have <= 128 blocks (DeepSeek-V3 61, Qwen3-235B 94)
MAX_EXPERTS = 4096  # real models have <= 512 (Qwen3-Next); must stay <= 32,768: traces store ids as int16
MAX_EXPERTS_USED = 64  # real models route <= 16 experts per token
MAX_SHARDS = 1024  # gguf-split names allow 99,999; real splits have <= a few hundred shards
MAX_TENSORS = 20_000  # real models have <= ~3,000 tensors in all shards (Qwen3-235B: ~1,400); ~2 s to parse
MAX_KV = 10_000  # real headers have <= ~60 metadata entries (tokenizer arrays are one entry each)
MAX_ARRAY_DEPTH = 16  # arrays of arrays: real headers never nest; 5,000 levels once overflowed the stack

# --- model sources (paths and URLs) ---
MAX_REDIRECTS = 5  # a header behind a CDN takes one or two; more is a loop or a probe
URL_CONNECT_TIMEOUT_S = 10.0  # opening a connection: a live host answers in well under a second
URL_READ_TIMEOUT_S = 30.0  # each wait for bytes once connected: a slow mirror answers in seconds
URL_DEADLINE_S = 120.0  # all reads of one URL together: a server dripping bytes cannot hold a session
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux

# --- routing traces ---
MAX_TRACE_TOKENS = 2_000_000  # a long recorded session; x 48 layers x 8 ids is ~1.5 GiB of int16
MAX_TRACE_IDS = 400_000_000  # expert ids in one trace or workload (1.6 GiB as int32)
MAX_TRACE_RECORDS = 50_000_000  # (ubatch, layer) records: ~1M ubatches of 48 layers
MAX_NPZ_BYTES = 2 * 1024**3  # uncompressed NPZ members together; checked before decompressing
MAX_NPZ_MEMBERS = 16  # our formats have at most 8 arrays
MAX_STREAMED_NPZ_BYTES = 64 * 1024**3  # a trace read chunk by chunk, twice: ~1 min a pass at 1 GB/s
TRACE_READ_AHEAD_ROWS = 64  # token rows a streamed trace's cursor reads at once: ~100 KiB per decoding sequence

# --- workload settings (llama-server) ---
MAX_CONCURRENCY = 256  # -np: more parallel streams than any single-GPU MoE server runs
MAX_DRAFT_TOKENS = 64  # --draft-max: real drafts are <= 16 tokens
MAX_PROMPT_TOKENS = 1_000_000  # a 1M-token context, the longest real models take
MAX_ROUTING_DRAWS = 100_000_000  # drawn prompt routing, tokens x layers x experts: ~3 s of CPU, ~1 GiB
MAX_UBATCH = 65_536  # -ub: llama.cpp's own limit on n_ubatch
MAX_CTX = 10_000_000  # -c: beyond every model's trained context
MAX_BUDGET_MIB = 16 * 1024 * 1024  # --moe-cache-mib: 16 TiB, more VRAM than any host holds
MAX_SYNTHETIC_TOKENS = 2_000_000  # --tokens: as long as the longest accepted trace

# --- simulation runs ---
SIM_CHUNK_RECORDS = 32_768  # records per chunk streamed through the kernel: ~1 MiB of arrays, ~1 ms of work
SIM_CHUNK_LOOKUPS = 1 << 20  # and expert ids per chunk (4 MiB as int32): large ubatches make fewer records a chunk
LANE_QUEUE_JOBS = 4  # chunks queued per kernel pass while the passes run on their own threads: ~4 MiB each
SIM_NS_PER_LOOKUP_PASS = 120  # per (lookup x pass): benchmarks/streaming.py measured 201-241 ns over 2 passes
MAX_SIM_SECONDS = 3600  # one run's estimated kernel time: longer is refused, not left running for hours
SIM_MEMORY_SHARE = 0.8  # of this machine's available memory one run may plan to use
WORKLOAD_BYTES_PER_LOOKUP = 36  # peak of build_workload per (token x layer x k) id, as measured in issue 12

# --- the app's caches (ui/common.py): 15-25 MiB an entry, bounded in count and age ---
APP_CACHE_TTL_S = 3600  # an hour: a visitor's session, not the server's life

# --- hardware flags ---
MAX_VRAM_GIB = 65_536  # --vram-gib: 64 TiB, beyond any single host's GPUs
MAX_RATE_GBS = 100_000  # --*-gbs: 100 TB/s, beyond any memory system or link

# --- logs ---
MAX_LOG_RUNS = 256  # runs in one log file (real ones hold a few restarts); each is rendered and cross-checked


def check_at_most(value: int, limit: int, what: str, error: type[MoeModelError] = MoeModelError) -> None:
    """Refuse `value` above `limit` with one line naming the limit (and below zero: counts are never negative)."""
    if value < 0:
        raise error(f"{what} is {value:,}: it cannot be negative")
    if value > limit:
        raise error(f"{what} is {value:,}, above this tool's limit of {limit:,}")


def available_cores() -> int:
    """CPU cores this process may run on: independent kernel passes run on that many threads at most."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_memory_bytes() -> int | None:
    """MemAvailable of this machine (Linux), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
