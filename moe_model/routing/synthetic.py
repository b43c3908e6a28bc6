"""Synthetic routing with interpretable locality knobs, and a fit of those knobs to a real trace.

This is a model of routing, not a measurement. Each layer has a log-popularity per expert that
wanders over time; each token keeps some of the previous token's experts and draws the rest by
popularity:

- skew: spread (standard deviation) of the log-popularity of a layer's experts. 0 = uniform.
- reuse: chance that an expert picked by the previous token (same layer, same sequence) is
  picked again.
- drift: per-token rate at which popularity moves (an AR(1) step of this weight), so hot
  experts cool down over a sequence.

`fit_knobs` estimates skew and reuse from a trace's statistics, then drift by matching the
trace's own LRU hit rate with one pool shared by every (layer, expert).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.fitting import coordinate_search
from moe_model.limits import (
    MAX_CONCURRENCY,
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_LAYERS,
    MAX_SYNTHETIC_DRAWS,
    MAX_SYNTHETIC_TOKENS,
    MAX_TRACE_IDS,
    ROUTING_READ_AHEAD,
    ROUTING_ROWS_CELLS_PER_THREAD,
    available_cores,
    check_at_most,
)
from moe_model.llama.batching import build_workload
from moe_model.readers.traces import make_token_trace
from moe_model.resources import data_path
from moe_model.stored import stored
from moe_model.threads import cache_once, worker_pool
from moe_model.workload import Batching, TokenTrace, Workload, WorkloadStream

GENERATOR = Path(__file__)  # its draws are kept between runs (moe_model.stored): a change to it draws them again
SEQ_LEN = 512  # tokens per synthetic sequence (a typical chat reply)
STREAM_BLOCK_SEQS = 16  # sequences generated at once when streaming: ~8k tokens, tens of MiB on 94 layers


@dataclass(frozen=True)
class Knobs:
    """Locality of synthetic routing (see module docstring for what each means)."""

    skew: float = 1.0
    working_set: float = 0.6
    drift: float = 0.01
    reuse: float = 0.3

    def __post_init__(self) -> None:
        if not (0 <= self.skew <= 6 and all(0 <= x <= 1 for x in (self.working_set, self.drift, self.reuse))):
            raise WorkloadError(f"knobs out of range: skew 0..6, working set, drift and reuse 0..1, got {self}")

    @property
    def words(self) -> str:
        """The knobs in plain words, for a page or a command (the module docstring says what each does)."""
        return (
            f"expert popularity spread {self.skew:.2f}, each sequence drawing on {100 * self.working_set:.0f} % of a "
            f"layer's experts, popularity drifting {100 * self.drift:.1f} % a token, {100 * self.reuse:.0f} % of the "
            "previous token's experts picked again"
        )


@dataclass(frozen=True)
class Shape:
    """The routing shape of a model: layers, experts per layer, experts used per token."""

    n_layer: int
    n_expert: int
    k: int

    def __post_init__(self) -> None:
        """The bounds a GGUF header is read with (limits), so every shape `plan` takes is one simulate takes."""
        if not (1 <= self.k <= min(self.n_expert, MAX_EXPERTS_USED) and self.n_expert <= MAX_EXPERTS):
            raise WorkloadError(f"impossible routing shape {self}: 1..{MAX_EXPERTS_USED} of 1..{MAX_EXPERTS} experts")
        if not 1 <= self.n_layer <= MAX_LAYERS:
            raise WorkloadError(f"impossible routing shape {self}: 1..{MAX_LAYERS:,} layers")


def _pick(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores along the last axis."""
    return np.argpartition(-scores, k - 1, axis=-1)[..., :k]


def _gumbel(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return -np.log(-np.log(rng.random(shape)))


def _swap_members(active: np.ndarray, rows: np.ndarray, base: np.ndarray, noise, weights: np.ndarray) -> None:
    """In the (sequence, layer) rows selected, one expert leaves the working set and one joins, by `noise` (one
    row of uniform numbers per selected row); `weights` (base where active, -inf elsewhere) follows."""
    seq, layer = np.nonzero(rows)
    if len(seq) == 0:
        return
    members = active[seq, layer]
    leave = np.argmax(np.where(members, noise, -1.0), axis=-1)
    join = np.argmax(np.where(members, -np.inf, base[0, layer] - np.log(-np.log(noise))), axis=-1)
    active[seq, layer, leave] = False
    active[seq, layer, join] = True
    weights[seq, layer, leave] = -np.inf
    weights[seq, layer, join] = base[0, layer, join]


def _check_length(n_tokens: int, seq_len: int) -> np.ndarray:
    """Sequence lengths: seq_len each, the last one shorter."""
    if not 1 <= n_tokens <= MAX_SYNTHETIC_TOKENS or seq_len < 1:
        raise WorkloadError(f"synthetic traces hold 1..{MAX_SYNTHETIC_TOKENS:,} tokens, got {n_tokens}")
    n_seq = -(-n_tokens // seq_len)
    lengths = np.full(n_seq, seq_len)
    lengths[-1] = n_tokens - seq_len * (n_seq - 1)
    return lengths


class _Numbers:
    """The generator's uniform numbers in the order they are drawn, read ahead in blocks of at most `block`:
    rng.random(n) then rng.random(m) draws what rng.random(n + m) does, so reading ahead changes no number.
    `certain`: how many the caller will surely take (each draw's noise aside), never read beyond (a streamed
    trace's next sequences continue the same generator)."""

    def __init__(self, rng: np.random.Generator, certain: int, block: int) -> None:
        self.rng, self.left, self.block = rng, certain, block
        self.buf, self.pos = np.empty(0), 0

    def take(self, n: int, certain: bool = True) -> np.ndarray:
        """The next n numbers (a view: the caller may overwrite them); `certain`: counted in `certain`."""
        self.left -= n if certain else 0
        if self.pos + n > len(self.buf):
            have = len(self.buf) - self.pos  # this take consumes what is left of the buffer: read on from it
            buf = np.empty(n + min(self.block, self.left))
            buf[:have] = self.buf[self.pos :]
            self.rng.random(out=buf[have:])
            self.buf, self.pos = buf, 0
        self.pos += n
        return self.buf[self.pos - n : self.pos]


def _draw(rows: slice, u: np.ndarray, keep, weights, prev, k: int) -> None:
    """One step's top-k draw for these rows of (sequence, layer), in place in u's rows: the numbers of
    `_pick(where(active, base + _gumbel, -inf), k)` on any split of the rows (weights - log(-log(u)) is -inf
    where weights is: log(-log(u)) is never -inf, u < 1). The k smallest of log(-log(u)) - weights, the experts
    kept from the previous token at -inf: the same values, negated exactly, as the largest of weights + gumbel."""
    scores = u[rows]
    np.log(scores, out=scores)
    np.negative(scores, out=scores)
    np.log(scores, out=scores)
    np.subtract(scores, weights[rows], out=scores)
    if keep is not None:
        row, held = keep[rows].nonzero()
        scores[row, prev[rows][row, held]] = -np.inf
    prev[rows] = scores.argpartition(k - 1, axis=-1)[:, :k]  # _pick's order of the k (the method: ~16k calls)


def _sequences(shape: Shape, knobs: Knobs, lengths: np.ndarray, base: np.ndarray, rng: np.random.Generator):
    """Routing of sequences of these lengths decoded in parallel: [sum(lengths), n_layer, k] int16.

    The random numbers are drawn in one stream, in the same order at any thread count (read ahead in blocks:
    _Numbers), a step's arithmetic and top-k on threads over (sequence, layer) rows where a step has enough of
    them (numpy releases the GIL)."""
    n_seq, seq_len = len(lengths), int(lengths.max())
    n_layer, n_expert, k = shape.n_layer, shape.n_expert, shape.k
    n_rows = n_seq * n_layer
    n_active = min(n_expert, max(k, round(knobs.working_set * n_expert)))
    active = np.zeros((n_seq, n_layer, n_expert), dtype=bool)  # each sequence's working set, drawn by popularity
    first = _pick(base + _gumbel(rng, (n_seq, n_layer, n_expert)), n_active)
    np.put_along_axis(active, first, True, axis=-1)
    weights = np.where(active, base, -np.inf).reshape(n_rows, n_expert)  # kept up to date by the drift's swaps
    out, prev = np.empty((seq_len, n_rows, k), dtype=np.int16), np.empty((n_rows, k), dtype=np.intp)
    n_parts = min(available_cores(), n_rows * n_expert // ROUTING_ROWS_CELLS_PER_THREAD) or 1
    parts = [slice(r[0], r[-1] + 1) for r in np.array_split(np.arange(n_rows), n_parts)]
    drifting, reusing = knobs.drift > 0 and n_active < n_expert, knobs.reuse > 0
    certain = seq_len * n_rows * n_expert + (seq_len - 1) * n_rows * k * reusing + seq_len * n_rows * drifting
    numbers = _Numbers(rng, certain, max(n_rows * (n_expert + k + 1), ROUTING_READ_AHEAD))
    u = numbers.take(n_rows * n_expert).reshape(n_rows, n_expert)
    with worker_pool(n_parts) as pool:
        for t in range(seq_len):
            keep = numbers.take(n_rows * k).reshape(n_rows, k) < knobs.reuse if t > 0 and reusing else None
            jobs = [(rows, u, keep, weights, prev, k) for rows in parts]
            running = [pool.submit(_draw, *job) for job in jobs] if pool else [_draw(*job) for job in jobs]
            swaps = numbers.take(n_rows).reshape(n_seq, n_layer) < knobs.drift if drifting else None
            n_swaps = int(np.count_nonzero(swaps)) if drifting else 0
            noise = numbers.take(n_swaps * n_expert, certain=False).reshape(n_swaps, n_expert) if n_swaps else None
            if t + 1 < seq_len:
                u = numbers.take(n_rows * n_expert).reshape(n_rows, n_expert)  # read while this step's are used
            for job in running if pool else ():
                job.result()
            out[t] = prev
            if n_swaps:
                _swap_members(active, swaps, base, noise, weights.reshape(n_seq, n_layer, n_expert))
    out = out.reshape(seq_len, n_seq, n_layer, k)
    return np.concatenate([out[: lengths[s], s] for s in range(n_seq)])


def _check_size(shape: Shape, n_tokens: int) -> None:
    """A draw of `n_tokens` within the limits before its arrays are made: its expert ids, and its scores (every
    expert of every layer per token: a deep or wide header's long trace is refused, not run for hours)."""
    ids, draws = n_tokens * shape.n_layer * shape.k, n_tokens * shape.n_layer * shape.n_expert
    check_at_most(ids, MAX_TRACE_IDS, f"the synthetic trace's expert ids ({n_tokens:,} tokens)", WorkloadError)
    check_at_most(draws, MAX_SYNTHETIC_DRAWS, f"the synthetic routing's scores ({n_tokens:,} tokens)", WorkloadError)


def generate(
    shape: Shape, knobs: Knobs, n_tokens: int, seq_len: int = SEQ_LEN, seed: int = 0, label: str = ""
) -> TokenTrace:
    """A synthetic trace: sequences of seq_len tokens decoded in parallel, one step at a time."""
    lengths = _check_length(n_tokens, seq_len)
    _check_size(shape, n_tokens)
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, knobs.skew, size=(1, shape.n_layer, shape.n_expert))  # shared by every sequence
    tokens = _sequences(shape, knobs, lengths, base, rng)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return make_token_trace(tokens, offsets, label=label or f"synthetic {knobs}")


def generate_stored(shape: Shape, knobs: Knobs, n_tokens: int, seed: int = 0, label: str = "") -> TokenTrace:
    """`generate`'s trace (sequences of SEQ_LEN), drawn once per install and read back after (moe_model.stored): the
    preset's trace every command replays."""
    lengths = _check_length(n_tokens, SEQ_LEN)
    _check_size(shape, n_tokens)
    inputs = (shape, knobs, n_tokens, SEQ_LEN, seed)
    tokens = stored("trace", inputs, lambda: generate(shape, knobs, n_tokens, seed=seed).experts, GENERATOR)
    return make_token_trace(tokens, np.concatenate([[0], np.cumsum(lengths)]), label=label or f"synthetic {knobs}")


def stream_workload(
    shape: Shape, knobs: Knobs, n_tokens: int, concurrency: int = 1, seq_len: int = SEQ_LEN, seed: int = 0
) -> WorkloadStream:
    """Decode-only synthetic routing as llama-server batches it (concurrency streams in lockstep, no
    warm-up), generated block by block of sequences so that no block holds more than a few MiB.

    Same model of routing as `generate` (one popularity shared by every sequence), drawn in another order.
    """
    lengths = _check_length(n_tokens, seq_len)
    check_at_most(concurrency, MAX_CONCURRENCY, "concurrency", WorkloadError)
    block = concurrency * -(-STREAM_BLOCK_SEQS // concurrency)  # whole lockstep groups: the schedule is unchanged
    _check_size(shape, n_tokens)
    steps = sum(int(lengths[i : i + concurrency].max()) for i in range(0, len(lengths), concurrency))

    def chunks() -> Iterator[Workload]:
        rng = np.random.default_rng(seed)
        base = rng.normal(0.0, knobs.skew, size=(1, shape.n_layer, shape.n_expert))
        batching = Batching(concurrency=concurrency, warmup=False)
        for start in range(0, len(lengths), block):
            part = lengths[start : start + block]
            trace = make_token_trace(_sequences(shape, knobs, part, base, rng), np.concatenate([[0], np.cumsum(part)]))
            yield build_workload(trace, batching, shape.n_expert)

    return WorkloadStream(
        shape.n_layer,
        shape.n_expert,
        shape.k,
        np.arange(1, concurrency + 1),
        steps * shape.n_layer,
        n_tokens * shape.n_layer * shape.k,
        n_tokens,
        steps,
        chunks,
        f"synthetic {knobs}, streamed",
    )


# --- fitting ---


def top_quarter_share(trace: TokenTrace, n_expert: int) -> float:
    """Mean over layers of the share of selections taken by the top 25 % of a layer's experts."""
    shares = []
    for layer in range(trace.n_layer):
        counts = np.sort(np.bincount(trace.experts[:, layer].ravel(), minlength=n_expert))[::-1]
        shares.append(counts[: max(1, n_expert // 4)].sum() / counts.sum())
    return float(np.mean(shares))


def previous_token_overlap(trace: TokenTrace) -> float:
    """Share of a token's experts (per layer) that the previous token of its sequence also picked."""
    ex = trace.experts.astype(np.int64)
    same_seq = np.ones(trace.n_tokens, dtype=bool)
    same_seq[trace.seq_offsets[:-1]] = False
    cur, prev = ex[1:][same_seq[1:]], ex[:-1][same_seq[1:]]
    hits = (cur[..., :, None] == prev[..., None, :]).any(axis=-1)
    return float(hits.mean())


SHARED_POOL_FRACTIONS = (0.25, 0.5, 0.75)
BOUNDS = {"skew": (0.0, 3.0), "working_set": (0.1, 1.0), "drift": (0.0, 0.2), "reuse": (0.0, 0.9)}


def shared_pool_hit_rates(trace: TokenTrace, n_expert: int, fractions=SHARED_POOL_FRACTIONS) -> list[float]:
    """Decode hit rates of one LRU shared by every (layer, expert), sized at these fractions of them."""
    from moe_model.llama.batching import build_workload
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.readers.model_spec import uniform_spec
    from moe_model.workload import Batching

    spec = uniform_spec(trace.n_layer, n_expert, trace.k)
    work = build_workload(trace, Batching(warmup=False), n_expert)
    n_pairs = trace.n_layer * n_expert
    results = simulate_budgets(spec, work, [max(trace.k, round(f * n_pairs)) + 1 for f in fractions])
    return [r.hit_rate or 0.0 for r in results]


@dataclass(frozen=True)
class TraceStats:
    """What a fit matches: popularity, next-token reuse and the shared-pool LRU curve."""

    top_quarter_share: float
    previous_token_overlap: float
    hit_rates: tuple[float, ...]

    @classmethod
    def of(cls, trace: TokenTrace, n_expert: int) -> TraceStats:
        return cls(
            top_quarter_share(trace, n_expert),
            previous_token_overlap(trace),
            tuple(shared_pool_hit_rates(trace, n_expert)),
        )

    def distance(self, other: TraceStats) -> float:
        """Root mean square difference in percentage points over every statistic."""
        a = np.array([self.top_quarter_share, self.previous_token_overlap, *self.hit_rates])
        b = np.array([other.top_quarter_share, other.previous_token_overlap, *other.hit_rates])
        return float(np.sqrt(np.mean((100 * (a - b)) ** 2)))


def coordinate_fit(loss, start: Knobs, names=tuple(BOUNDS), rounds: int = 2, steps: int = 7, progress=None) -> Knobs:
    """Minimise loss(knobs) one knob at a time by golden-section search inside BOUNDS (4 decimals kept)."""
    return coordinate_search(loss, start, BOUNDS, names, rounds, steps, digits=4, progress=progress)


def fit_knobs(
    trace: TokenTrace, n_expert: int, n_tokens: int = 10_000, seed: int = 0, progress=None
) -> tuple[Knobs, float]:
    """Knobs whose synthetic routing matches the trace's statistics; returns them and the RMS error (points)."""
    target = TraceStats.of(trace, n_expert)
    shape = Shape(trace.n_layer, n_expert, trace.k)
    cache: dict[Knobs, float] = {}

    def loss(knobs: Knobs) -> float:
        if knobs not in cache:
            cache[knobs] = TraceStats.of(generate(shape, knobs, n_tokens, seed=seed), n_expert).distance(target)
        return cache[knobs]

    best = coordinate_fit(loss, Knobs(), progress=progress)
    return best, loss(best)


PRESETS_PATH = data_path("synthetic_presets.json")
FALLBACK_PRESET = "gpt-oss-20b"

MATCH_MODEL = "fitted to this model"
MATCH_SHAPE = "same expert shape"


def load_presets(path: Path = PRESETS_PATH) -> dict[str, dict]:
    """Fitted knob presets, one per expert architecture, with what each was fitted to and its spread (written
    by scripts/fit_synthetic_presets.py)."""
    return json.loads(path.read_text())["presets"]


def fallback_spread(path: Path = PRESETS_PATH, shape_known: bool = True) -> float:
    """Hit-rate points a model with no preset of its own carries: the widest of every preset's spread and of the
    nearest-shape presets measured on the architectures they were not fitted to; with no shape known, the widest
    of every preset on every other architecture (scripts/fit_synthetic_presets.py)."""
    fallback = json.loads(path.read_text())["fallback"]
    return float(fallback["spread_points" if shape_known else "unknown_shape_spread_points"])


@dataclass(frozen=True)
class RoutingPreset:
    """The synthetic-routing preset used for a model (a model of routing, fitted to measurements).

    match: MATCH_MODEL, MATCH_SHAPE or "no preset of its own: nearest shape, NAME (E experts, K used), ...".
    spread_points: the preset's error in hit-rate points (the larger of its rms on the rows it was fitted to and
    on held-out rows); for a model with no preset of its own, the widest spread measured (fallback_spread).
    """

    name: str
    knobs: Knobs
    spread_points: float
    fitted_to: str
    match: str
    shape: Shape | None = None

    def __iter__(self):
        """`name, knobs = preset_for(...)`, as before RoutingPreset existed."""
        return iter((self.name, self.knobs))

    @property
    def is_fallback(self) -> bool:
        return self.match not in (MATCH_MODEL, MATCH_SHAPE)

    @property
    def spreads(self) -> tuple[float, float]:
        """± hit-rate points, and no factor on the misses (routing.logged.LogRouting.spreads has one)."""
        return self.spread_points, 0.0

    def describe(self) -> str:
        """One line for a caption: which preset, why, and its spread."""
        return f"{self.name} preset ({self.match}; ±{self.spread_points:.1f} hit-rate points): {self.knobs.words}"


def _preset(name: str, entry: dict, match: str, spread: float | None = None) -> RoutingPreset:
    shape = Shape(**entry["shape"]) if "shape" in entry else None
    spread = round(float(entry["spread_points"] if spread is None else spread), 2)
    return RoutingPreset(name, Knobs(**entry["knobs"]), spread, entry["fitted_to"], match, shape)


def _shape_distance(n_expert: int, k: int, shape: Shape) -> float:
    return abs(np.log(n_expert / shape.n_expert)) + abs(np.log(k / shape.k))


def _borrowed(key: str, shape: Shape | None, spread: float) -> str:
    used = f"{key} ({shape.n_expert} experts, {shape.k} used)" if shape else f"{key} (no shape given)"
    return f"no preset of its own: nearest shape, {used}, with the widest spread (±{spread:.1f} points)"


def preset_for(model, presets: dict[str, dict] | None = None, fallback: float | None = None) -> RoutingPreset:
    """The routing preset for a model (a ModelSpec, or just its name), and why it was picked.

    1. a preset fitted to this model (its name, and its expert shape when the model's is known);
    2. else one fitted to the same (n_expert, n_expert_used), the closest layer count first;
    3. else the nearest shape by |log expert-count ratio| + |log used-count ratio|, with the fallback spread;
    with only a name and no name match: the GPT-OSS-20B preset (real routing), with the fallback spread.
    """
    presets = presets or load_presets()
    name = model if isinstance(model, str) else model.name
    shape = None if isinstance(model, str) else (model.n_layer, model.n_expert, model.n_expert_used)
    widest = fallback_spread(shape_known=shape is not None) if fallback is None else fallback
    for key, entry in presets.items():
        aliases = entry.get("models", [key])
        same = shape is None or "shape" not in entry or (entry["shape"]["n_expert"], entry["shape"]["k"]) == shape[1:]
        if same and any(a.lower() in name.lower() for a in aliases):
            return _preset(key, entry, MATCH_MODEL)
    shaped = {key: Shape(**entry["shape"]) for key, entry in presets.items() if "shape" in entry}
    if shape is None or not shaped:
        return _preset(FALLBACK_PRESET, presets[FALLBACK_PRESET], _borrowed(FALLBACK_PRESET, None, widest), widest)
    n_layer, n_expert, k = shape
    same_shape = [key for key, s in shaped.items() if (s.n_expert, s.k) == (n_expert, k)]
    if same_shape:
        key = min(same_shape, key=lambda key: (abs(shaped[key].n_layer - n_layer), key))
        return _preset(key, presets[key], MATCH_SHAPE)
    key = min(shaped, key=lambda key: (_shape_distance(n_expert, k, shaped[key]), key))
    return _preset(key, presets[key], _borrowed(key, shaped[key], widest), widest)


# --- prompt ubatches: distinct experts per window of consecutive tokens ---

WINDOW_CURVE_TOKENS = 16384  # one long sequence: a prompt is one request, its working set drifts along it
WINDOW_CURVE_LAYERS = 4  # layers are statistically alike: four give the mean at a quarter of the cost
# The project's ground-truth models have random weights (groundtruth/run3 README): no locality, only the skew
# random routers have. Skew fitted to run3's traced 129-token prompt ubatch (114.8 of 128 experts per layer).
RANDOM_WEIGHT_MODELS = ("synthetic-qwen3moe",)
RANDOM_WEIGHT_KNOBS = Knobs(skew=1.2, working_set=1.0, drift=0.0, reuse=0.0)


WINDOW_SIZES = 2 ** np.arange(int(np.log2(WINDOW_CURVE_TOKENS)))  # the curve's windows, 1 to 8,192 tokens
WINDOW_SIZES.setflags(write=False)


@cache_once  # every page's prompt pricing asks for it first thing: sessions opening together wait for one
def _window_curve(n_expert: int, k: int, knobs: Knobs) -> tuple[np.ndarray, np.ndarray]:
    """Mean distinct experts per layer in windows of 2^i consecutive tokens of one synthetic sequence (drawn once
    per install: moe_model.stored)."""
    inputs = (n_expert, k, knobs, WINDOW_CURVE_TOKENS, WINDOW_CURVE_LAYERS)
    return WINDOW_SIZES, stored("window_curve", inputs, lambda: _drawn_window_curve(n_expert, k, knobs), GENERATOR)


def _drawn_window_curve(n_expert: int, k: int, knobs: Knobs) -> np.ndarray:
    """_window_curve's means, drawn."""
    shape = Shape(WINDOW_CURVE_LAYERS, n_expert, k)
    trace = generate(shape, knobs, WINDOW_CURVE_TOKENS, seq_len=WINDOW_CURVE_TOKENS, seed=0)
    means = []
    for size in WINDOW_SIZES:
        picks = trace.experts[: WINDOW_CURVE_TOKENS // size * size].astype(np.int64)
        windows = picks.reshape(-1, size, WINDOW_CURVE_LAYERS, k).transpose(0, 2, 1, 3).reshape(-1, size * k)
        flags = np.zeros((len(windows), n_expert), dtype=bool)
        flags[np.arange(len(windows))[:, None], windows] = True
        means.append(flags.sum(axis=-1).mean())
    return np.array(means)


def window_distinct(n_expert: int, k: int, knobs: Knobs, tokens: int) -> float:
    """Expected distinct experts per layer among `tokens` consecutive tokens of one sequence under these knobs
    (a model of routing: interpolated in log tokens, held at the longest window beyond it)."""
    sizes, means = _window_curve(n_expert, k, knobs)
    return float(np.interp(np.log2(max(tokens, 1)), np.log2(sizes), means))


def prompt_knobs(model) -> Knobs:
    """The routing a model's prompt ubatches follow: its preset's, or random routers' for the project's
    random-weight ground-truth models."""
    return _prompt_knobs(model.name, model.n_layer, model.n_expert, model.n_expert_used)


@cache
def _prompt_knobs(name: str, n_layer: int, n_expert: int, k: int) -> Knobs:
    if any(random in name for random in RANDOM_WEIGHT_MODELS):
        return RANDOM_WEIGHT_KNOBS
    return preset_for(_Named(name, n_layer, n_expert, k)).knobs


@dataclass(frozen=True)
class _Named:
    """What preset_for reads of a model: its name and expert shape."""

    name: str
    n_layer: int
    n_expert: int
    n_expert_used: int
