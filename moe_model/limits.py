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
MAX_EMBEDDING = 131_072  # n_embd: real models have <= 16,384 (Llama-3.1-405B; DeepSeek-V3 7,168)
MAX_FEED_FORWARD = 1_048_576  # (expert) feed-forward width: real <= 53,248 (Llama-3.1-405B dense)
MAX_HEADS = 4096  # attention heads and KV heads: real models have <= 128
MAX_HEAD_DIM = 16_384  # key / value length of one head: real <= 576 (DeepSeek's MLA)
MAX_VOCAB = 16_777_216  # tokens: real vocabularies have <= 262,144 (Gemma 3)
MAX_FILE_TYPE = 1024  # general.file_type: llama.cpp's LlamaFileType values are < 64
MAX_ARCH_CHARS = 64  # general.architecture: llama.cpp's architecture names have <= 20 characters
MAX_ECHO_CHARS = 120  # text from a file or URL quoted in a message or a table is cut beyond this
MAX_ARG_ERROR_CHARS = 1000  # a command-line refusal (argparse's) with the value it quotes: cut beyond this
# the header prefix the advice tells users to make: 4x the largest bundled header (gpt-oss-20b's 3,737,954 bytes,
# a 200k-token vocabulary; tests/readers/test_gguf_header.py measures them); a prefix cut short says how much more
# it needs
HEADER_PREFIX_MIB = 16

# --- host records (record --host-out, llama-bench output) ---
MAX_HOST_RECORD_BYTES = 64 * 1024  # a host record is ~1 KB; llama-bench's JSON of one model a few KB

# --- model sources (paths and URLs) ---
MAX_REDIRECTS = 5  # a header behind a CDN takes one or two; more is a loop or a probe
URL_CONNECT_TIMEOUT_S = 10.0  # opening a connection: a live host answers in well under a second
URL_READ_TIMEOUT_S = 30.0  # each wait for bytes once connected: a slow mirror answers in seconds
URL_DEADLINE_S = 120.0  # all reads of one URL together: a server dripping bytes cannot hold a session
MODEL_DEADLINE_S = 300.0  # every shard of one model together: 1,024 shards cannot each take a URL's deadline
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux

# --- routing traces ---
MAX_TRACE_TOKENS = 2_000_000  # a long recorded session; x 48 layers x 8 ids is ~1.5 GiB of int16
MAX_TRACE_IDS = 400_000_000  # expert ids in one trace or workload (1.6 GiB as int32)
MAX_TRACE_RECORDS = 50_000_000  # (ubatch, layer) records: ~1M ubatches of 48 layers
MAX_NPZ_BYTES = 2 * 1024**3  # uncompressed NPZ members together; checked before decompressing
MAX_NPZ_MEMBERS = 16  # our formats have at most 8 arrays
MAX_NPZ_INFLATION = 32  # members together inflate <= 32x their zipped bytes: real traces 1.9x-5.0x, zeros ~1,000x
NPZ_INFLATION_FREE_BYTES = 16 * 1024**2  # an NPZ inflating to less is read at any ratio: a trace of one id is ~1,000x
MAX_STREAMED_NPZ_BYTES = 64 * 1024**3  # a trace read chunk by chunk, twice: ~1 min a pass at 1 GB/s
TRACE_READ_AHEAD_ROWS = 64  # token rows a streamed trace's cursor reads at once: ~100 KiB per decoding sequence
CLI_MAX_LOOKUPS = 50_000_000  # ids the CLI replays of a trace unless --max-lookups: ~11 s at 215 ns an id (GPT-OSS)
APP_MAX_LOOKUPS = 16_000_000  # and the app per upload: the real GPT-OSS-20B trace (12.3 M ids) fits, 10x of it not
CSV_BLOCK_BYTES = 1 << 20  # CSV text a streamed CSV trace parses at a time (its checking pass, each cursor)
MAX_CSV_LINE_BYTES = 1 << 20  # one CSV line: a trace's line is a few ids; a longer one is refused before parsing
CSV_CHUNK_ROWS = 1 << 16  # CSV rows a whole read parses between two asks of should_stop: ~0.05 s of pandas
MAX_CSV_COLUMNS = 256  # a CSV trace's columns: seq, token, layer and <= MAX_EXPERTS_USED ids, with room for others

# --- workload settings (llama-server) ---
MAX_CONCURRENCY = 256  # -np: more parallel streams than any single-GPU MoE server runs
MAX_DRAFT_TOKENS = 64  # --draft-max: real drafts are <= 16 tokens
MAX_PROMPT_TOKENS = 1_000_000  # a 1M-token context, the longest real models take
MAX_ROUTING_DRAWS = 100_000_000  # drawn prompt routing, tokens x layers x experts: ~3 s of CPU, ~1 GiB
MAX_UBATCH = 65_536  # -ub: llama.cpp's own limit on n_ubatch
MAX_CTX = 10_000_000  # -c: beyond every model's trained context
MAX_BUDGET_MIB = 16 * 1024 * 1024  # --moe-cache-mib: 16 TiB, more VRAM than any host holds
# --tokens: what simulate answers (it holds the generated trace): Qwen3-30B-A3B at 500,000 took 121 s and 3.4 GiB
# peak RSS on a shared 2-core machine (2026-12-06, load ~2-10); 2,000,000 (as long as the longest trace) grew
# linearly to ~8 minutes and ~14 GiB (200,000: 36 s, 1.4 GiB) and gave no answer in 400 s in issue 39
MAX_SYNTHETIC_TOKENS = 500_000
# scores a synthetic draw computes, tokens x layers x experts (each token scores every expert of every layer): the
# measurement above, Qwen3-30B-A3B's 500,000 x 48 x 128, so a deeper or wider header gets proportionally fewer tokens
# (its time and its arrays, (sequence x layer x expert) scores per 512 tokens, stay those of that run)
MAX_SYNTHETIC_DRAWS = MAX_SYNTHETIC_TOKENS * 48 * 128

# --- policy knobs (--knob) ---
MAX_IDLE_ROUNDS = 10**9  # lazy-unload's idle rounds: more ubatches than any replay (MAX_TRACE_RECORDS records)
MAX_COOLDOWN_MS = 1e9  # lazy-unload's cooldown: ~12 days idle, beyond any server's run

# --- llama-server defaults the library's layers share (speed.scenario.Scenario declares each setting) ---
DEFAULT_CTX = 4096  # -c: llama-server's default context
DEFAULT_UBATCH = 512  # -ub: llama.cpp's default n_ubatch
DEFAULT_PROMPT_TOKENS = 512  # a request's prompt when none is given (and the app's first context depth)
MAX_COMMAND_CHARS = 64 * 1024  # a llama-server command read back (speed/server_command.py): real ones are < 1,000
DEFAULT_ACCEPT_RATE = 0.7  # draft acceptance assumed when none is given: a well-matched draft model's typical rate

# --- record (the user's model run on their CPU through llama-cpp-python) ---
RECORD_BUILD_MINUTES = 12  # CPU minutes pip install -e .[record] spends compiling llama.cpp (measured: docs/record.md)
DEFAULT_RECORD_PREDICT = 128  # -n: tokens generated per prompt
MAX_RECORD_PREDICT = 1_000_000  # -n: a 1M-token generation, beyond any context
DEFAULT_RECORD_BATCH = 2048  # -b: llama-server's default n_batch
MAX_RECORD_PROMPTS = 100_000  # prompts in one file: days of CPU time for a real model
MAX_RECORD_PROMPT_BYTES = 64 * 1024 * 1024  # the prompts file, read whole
RECORD_TIMED_TOKENS = 64  # generation tokens the host record's decode speed is timed on, at least (prompts allowing)
RECORD_PROGRESS_S = 2.0  # seconds between progress lines on stderr
DRIVE_READ_BYTES = 1 << 30  # --measure-drive: the model file's first GiB is read (seconds on an SSD, ~10 s on a disk)
DRIVE_READ_CHUNK = 8 << 20  # bytes per read() of it: large sequential reads, as a drive's rated speed is measured
DRIVE_MIN_BYTES = 64 << 20  # a shorter read times the drive's latency more than its rate: no rate is given
DRIVE_COLD_SHARE = 0.01  # a read is cold where at most 1 % of the range was in the page cache when it began

# --- simulation runs ---
SIM_CHUNK_RECORDS = 32_768  # records per chunk streamed through the kernel: ~1 MiB of arrays, ~1 ms of work
SIM_CHUNK_LOOKUPS = 1 << 20  # and expert ids per chunk (4 MiB as int32): large ubatches make fewer records a chunk
SIM_CHUNK_BYTES_PER_RECORD = 64  # a chunk's record arrays and masks, per record (each pass adds its modes' byte)
SIM_CHUNK_BYTES_PER_ID = 4  # a chunk's expert ids (int32 at most)
LANE_QUEUE_JOBS = 4  # chunks queued per kernel pass while the passes run on their own threads: ~4 MiB each
ROUTING_STORED_BYTES = 128 * 2**20  # drawn routing kept between runs (moe_model.stored), least recently used dropped
ROUTING_READ_AHEAD = 65_536  # synthetic routing: uniform numbers drawn at once (512 KiB), at least a step's
ROUTING_ROWS_CELLS_PER_THREAD = 32_768  # synthetic routing: (row x expert) scores per thread and step, ~0.3 ms
SIM_NS_PER_LOOKUP_PASS = 120  # per (lookup x pass): benchmarks/streaming.py measured 201-241 ns over 2 passes
# ClassLRU pool sizes below this share of the group's keys replay on their own lists (mostly misses: short lists
# evict cheaper), the others in lanes of 64 (mostly hits: one word read per key); the counts are the same either way
CLASS_LRU_LIST_SHARE_OF_KEYS = 0.25
# lanes only for at least this many larger pool sizes: fewer do not pay for the class queues (one budget 0.47-0.53 s
# of CPU on lists against 0.73-0.95 s in a lane, 6 alike, 24 on lists 1.8x the lane's; Qwen3-30B, 20,000 tokens)
CLASS_LRU_LANE_MIN_POOLS = 6
CLASS_LRU_NS_PER_LOOKUP_BUDGET = 40  # per (lookup x budget), one thread: bench_class_lru 42 ns (20.8 s, 64 x 7.68 M)
CLASS_LRU_BAND_ALL = 8  # pool sizes of a pass up to which the band's other readings replay each one
CLASS_LRU_BAND_STRIDE = 4  # beyond, every 4th and the largest: the band's 2 readings add ~1/2 of the curve's time
MAX_BUDGETS = 512  # budgets of one simulate call: a curve needs tens
MAX_SIM_SECONDS = 3600  # one run's estimated kernel time: longer is refused, not left running for hours
MAX_LOOKUPS_FLAG = MAX_SIM_SECONDS * 10**9 // SIM_NS_PER_LOOKUP_PASS  # --max-lookups: one pass of more is refused
SIM_MEMORY_SHARE = 0.8  # of this machine's available memory one run may plan to use
WORKLOAD_BYTES_PER_LOOKUP = 36  # peak of build_workload per (token x layer x k) id, as measured in issue 12

# --- budget curves (pricing/curve.py) and the policy comparison (answers/policy_compare.py) ---
CURVE_SPREAD_BUDGETS = 32  # a curve's budgets, spread from the smallest that starts to the one that caches every expert
CURVE_SLIDER_STOPS = 40  # a budget slider's stops (one off the curve replays that budget alone)
POLICY_BUDGETS = 8  # budgets each policy of a comparison replays (a run per budget for all but the exact LRU)
REPLAY_MEMO_ENTRIES = 2048  # budgets one workload's replay memo keeps: a few KiB each (per-layer counts, a plan)
MAX_POLICY_UBATCHES = 5000  # ubatches a comparison replays: seconds per policy and budget on the real GPT-OSS trace

# --- the app's caches and uploads (ui/cached.py): bounded in bytes and age, shared by every session ---
APP_CACHE_TTL_S = 3600  # an hour: a visitor's session, not the server's life
MAX_SESSION_UPLOAD_BYTES = 96 * 1024 * 1024  # a session's kept uploads together: a 16 MiB header, logs, a trace
MAX_SESSION_LOG_ROUTINGS = 4  # log sets whose fitted routing a session keeps (~20 s each to fit)
APP_CACHE_BYTES = 384 * 1024**2  # every cached result together (models, workloads, curves, logs): LRU out beyond
APP_CACHE_ENTRY_BYTES = 128 * 1024**2  # one result larger is served to its session, never kept for others
APP_UPLOAD_PEAK_BYTES = 768 * 1024**2  # the estimated peak of reading one upload into arrays: refused above
APP_LOG_BYTES = 32 * 1024**2  # one uploaded log: real -lv 4 logs of long runs are a few MiB
APP_IDLE_RELEASE_S = 30  # no session connected this long: the shared results go and the memory goes back
APP_COMPILE_WAIT_S = 300  # the longest a page waits for the kernels' first compilation (a slow, busy machine)
APP_PAGE_WORKERS = 2  # threads running pages' long work (curves, comparisons) for every session: one per core here
APP_PROGRESS_S = 0.25  # how often a page waiting for its long work redraws its progress (and can be interrupted)
APP_SESSION_LOOK_S = 2.0  # how often the server looks for closed sessions whose page work is to be stopped
APP_COMPILE_POLL_S = 1.0  # how often the page's note of that compilation's elapsed seconds moves

# --- hardware flags ---
MAX_VRAM_GIB = 65_536  # 64 TiB, beyond any single host's GPUs: caps --fit-target-mib (one GPU: Hardware's range)
MAX_RATE_GBS = 100_000  # --*-gbs: 100 TB/s, beyond any memory system or link
MAX_GPUS = 64  # --tensor-split values: llama.cpp's CUDA backend handles at most 16 devices
MAX_SPLIT_SHARE = 1_000_000  # one --tensor-split value: ratios, or MiB of a GPU (<= ~200,000)

# --- what-would-fit advice (answers/fit_advice.py) ---
MIN_ADVICE_CTX = 2048  # the shortest context suggested: below it a prompt and its reply barely fit

# --- logs ---
MAX_LOG_RUNS = 256  # runs in one log file (real ones hold a few restarts); each is rendered and cross-checked
MAX_LOG_ROUTING_TOKENS = 4096  # decode tokens a routing fitted to logs replays per knob setting: ~0.1 s at 48 layers
MAX_LOG_CLOCK_BACKSTEPS = 16  # the logger's clock stepping back within one run: two processes' lines interleaved
# (one process stamps its lines in the order it writes them; real logs of runs one after another step back <= 4 times)
MAX_LOG_ALERTS = 20  # warning lines and error lines kept per run (each); the rest are counted, not rendered
MAX_LOG_LINE_CHARS = 64 * 1024  # a line is cut beyond this while reading: real lines are < 2,000 characters
MAX_LOG_BYTES = 2 * 1024**3  # one llama.cpp log file, read streamed line by line: bounds the work, not the memory
MAX_ALERT_CHARS = 400  # one warning or error line as kept: llama.cpp's are < 200 characters
MAX_LOG_COUNT = 10**15  # hits, misses, tokens or ids in one run: 10^15 lookups are decades of decoding
MAX_LOG_AMOUNT = 1e15  # MiB or ms one log line gives: 10^15 MiB is ~1 ZiB uploaded, 10^15 ms ~30,000 years

# --- machine files (calibrate) ---
MAX_MACHINE_RUNS = 48  # runs calibrated at once: one refit per run left out, so time grows as its square (12: ~25 s)
MAX_CHECKED_RUNS = 48  # runs set beside their range predicted before calibration at once (each priced: ~1 s)
MAX_RUN_REQUESTS = 1_000_000  # requests one server run timed: a busy day
MAX_BUILD = 10**9  # a llama.cpp build number (b12569 today)
MAX_MACHINE_FILE_BYTES = 1024 * 1024  # ~1 KiB a run: read whole, so capped
MAX_MACHINE_TEXT_CHARS = 4096  # a name, path or reason: PATH_MAX, and nothing longer is echoed
MAX_MACHINE_REL_ERROR = 0.99  # a prediction's relative range: at +-100 % its low end is no speed at all


def check_at_most(value: int, limit: int, what: str, error: type[MoeModelError] = MoeModelError) -> None:
    """Refuse `value` above `limit` with one line naming the limit (and below zero: counts are never negative)."""
    if value < 0:
        raise error(f"{what} is {value:,}: it cannot be negative")
    if value > limit:
        raise error(f"{what} is {value:,}, above this tool's limit of {limit:,}")


def shown(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """`text` as quoted back to a user: cut to `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


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


# --- what a person can work with (answers.usability): the lines a setting is called slow or unusable at ---
UNUSABLE_DECODE_TPS = 2.0  # below ~2 t/s a reply of a few hundred tokens takes minutes: not a chat
SLOW_DECODE_TPS = 5.0  # below ~5 t/s text arrives slower than people read it
UNUSABLE_FIRST_TOKEN_S = 60.0  # a minute before the first token: a person gives up on the request
SLOW_FIRST_TOKEN_S = 15.0  # beyond ~15 s a person waits visibly
NEAREST_ROW_SIZE_RATIO = 2.0  # a family's 30B row says little of its 235B model: measured rows beyond 2x are not shown
