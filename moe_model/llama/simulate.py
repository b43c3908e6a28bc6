"""Replay a workload through llama.cpp's slot pools (b11549 semantics, plain LRU).

Per (cached layer, ubatch) llama.cpp either uses the pool (<= 32 tokens and at most as many
distinct experts as slots), copies already-cached experts for an offloaded large batch
(>= 32 tokens, reading the pool without touching the LRU), or computes on the CPU. Statistics
are split like llama.cpp's teardown lines: "ubatch <= 8" when ids <= 8 x n_expert_used.
`simulate_budgets` computes many budgets in one pass per group and equals running each alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.limits import (
    LANE_QUEUE_JOBS,
    MAX_SIM_SECONDS,
    SIM_CHUNK_BYTES_PER_ID,
    SIM_CHUNK_BYTES_PER_RECORD,
    SIM_CHUNK_LOOKUPS,
    SIM_CHUNK_RECORDS,
    SIM_MEMORY_SHARE,
    SIM_NS_PER_LOOKUP_PASS,
    available_memory_bytes,
)
from moe_model.llama import lru_kernel
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP, check_kernel_inputs
from moe_model.llama.pool_rule import NO_POOL, copies_from_pool, pool_classes
from moe_model.llama.pool_rule import pool_need as _pool_need
from moe_model.llama.slot_plan import MIB, CachePlan, Placement, plan_cache
from moe_model.progress import WorkStoppedError, checkpoint
from moe_model.readers.model_spec import ModelSpec
from moe_model.threads import Lanes
from moe_model.workload import Workload, WorkloadStream, stream_of

OFFLOAD_DEVICE = 0  # large batches are offloaded to the first GPU; only its groups can be copied from


@dataclass(frozen=True)
class Kernel:
    """A replacement policy's pass over one group's records for several pool sizes at once (ascending `caps`).

    `feed(state, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert)` continues a pass with a
    chunk; `results(state)` gives (hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe hits [n_caps]), the
    middle axis being llama.cpp's "ubatch <= 8" / "ubatch  > 8" classes. A chunk holds every group's records:
    feed must leave the state as it is for a MODE_SKIP record. The LRU kernel is b11549's exact one.
    """

    name: str
    new_state: Callable[..., object]  # (caps, n_layer, n_expert, group_keys: the group's layers x n_expert)
    feed: Callable[..., None]
    results: Callable[[object], tuple[np.ndarray, np.ndarray, np.ndarray]]
    state_bytes: Callable[[int, int, np.ndarray], int]  # (n_layer, n_expert, caps)
    ns_per_lookup: Callable[[int], float]  # kernel time per lookup of a pass over n pool sizes
    lanes: bool = True  # passes may run at once on threads (feed releases the GIL and starts no threads itself)
    # with lanes False, a feed that starts no threads: several passes then run at once on threads with it
    lane_feed: Callable[..., None] | None = None
    # a modelled policy's other readings: (hits [n_readings, n_caps], which pool sizes they replayed [n_caps])
    band: Callable[[object], tuple[np.ndarray, np.ndarray]] | None = None
    band_readings: tuple[str, ...] = ()  # their names


LRU_KERNEL = Kernel(
    "lru-b11549",
    lambda caps, n_layer, n_expert, group_keys=None: lru_kernel.new_state(caps, n_layer, n_expert),
    lru_kernel.feed,
    lru_kernel.results,
    lambda n_layer, n_expert, caps: lru_kernel.state_bytes(n_layer, n_expert, len(caps)),
    lambda n_pools: SIM_NS_PER_LOOKUP_PASS,  # one Fenwick pass serves every pool size
)


@dataclass(frozen=True)
class ClassStats:
    """One of llama.cpp's teardown lines: distinct experts found / uploaded, and the bytes uploaded."""

    hits: int
    misses: int
    uploaded_bytes: int

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    @property
    def uploaded_mib(self) -> float:
        return self.uploaded_bytes / MIB

    def as_dict(self) -> dict:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": self.hit_rate,
            "uploaded_bytes": self.uploaded_bytes,
        }


@dataclass(frozen=True)
class PolicyBand:
    """The hit rate and uploads over a modelled policy's open readings at one budget: the lowest and highest, the
    readings that give them ("default" for the kernel's own reading), beside the default's own."""

    hit_rate_low: float
    hit_rate_high: float
    low_reading: str
    high_reading: str
    uploaded_bytes_per_token_low: float
    uploaded_bytes_per_token_high: float
    default_hit_rate: float
    interpolated: bool = False  # the other readings' offsets interpolated from neighbouring budgets (class_lru)

    @property
    def width_points(self) -> float:
        return 100 * (self.hit_rate_high - self.hit_rate_low)

    @property
    def shift_points(self) -> tuple[float, float]:
        """How far below and above the default reading's hit rate the band reaches, in points (<= 0, >= 0)."""
        return 100 * (self.hit_rate_low - self.default_hit_rate), 100 * (self.hit_rate_high - self.default_hit_rate)

    def as_dict(self) -> dict:
        return asdict(self) | {"width_points": self.width_points}

    def at_hit_rate(self, hit_rate: float) -> PolicyBand:
        """The band around another count of the default reading's hit rate (a warm pool's, traffic.steady_hits):
        every reading's hits scaled as the default's were, so the band holds the rate it is drawn around."""
        scale = hit_rate / self.default_hit_rate if self.default_hit_rate else 1.0
        low, high = (min(1.0, r * scale) for r in (self.hit_rate_low, self.hit_rate_high))
        return replace(self, hit_rate_low=min(low, hit_rate), hit_rate_high=max(high, hit_rate),
                       default_hit_rate=hit_rate)  # fmt: skip


def policy_band(
    hits: int, lookups: int, uploaded_bytes: int, others: np.ndarray, readings: tuple, tokens: int, replayed: bool
) -> PolicyBand | None:
    """The band of one budget from the default's counts and the other readings' (`others`: per reading, its hits
    and the upload bytes they spare beyond the default's); None without lookups."""
    if not lookups:
        return None
    rates = {"default": hits / lookups} | {r: float(h) / lookups for r, (h, _) in zip(readings, others, strict=True)}
    uploads = {"default": float(uploaded_bytes)} | {
        r: uploaded_bytes - float(spared) for r, (_, spared) in zip(readings, others, strict=True)
    }
    low, high = min(rates, key=rates.get), max(rates, key=rates.get)
    per_token = [u / tokens if tokens else 0.0 for u in uploads.values()]
    low_high = (rates[low], rates[high], low, high, min(per_token), max(per_token))
    return PolicyBand(*low_high, rates["default"], not replayed)


@dataclass(frozen=True, eq=False)
class SimResult:
    """What the cache did over a workload at one budget."""

    budget_mib: int
    plan: CachePlan
    small: ClassStats
    large: ClassStats
    copied_experts: int  # per expert-tensor slice, as llama.cpp counts them
    copied_bytes: int
    bypassed_ubatches: int  # ubatches in which some cached layer did not use the pool
    layer_hits: np.ndarray  # [n_layer], both classes
    layer_lookups: np.ndarray
    decode_tokens: int
    band: PolicyBand | None = None  # a modelled policy's open readings (Kernel.band); None where exact
    policy: str = ""  # the policy replayed (its kernel's name)
    build: int | None = None  # the llama.cpp build whose policy that is, where the caller chose it by build

    @property
    def starts(self) -> bool:
        return self.plan.starts

    @property
    def hit_rate(self) -> float | None:
        total = self.small.lookups + self.large.lookups
        return (self.small.hits + self.large.hits) / total if total else None

    @property
    def uploaded_bytes(self) -> int:
        return self.small.uploaded_bytes + self.large.uploaded_bytes

    def uploaded_bytes_per_token(self) -> float:
        return self.uploaded_bytes / self.decode_tokens if self.decode_tokens else 0.0

    def log_lines(self) -> list[str]:
        """The teardown lines llama.cpp would print for these counts."""
        lines = []
        for name, st in (("ubatch <= 8", self.small), ("ubatch  > 8", self.large)):
            if st.lookups:
                lines.append(
                    f"llama_moe_cache: {name}: hits = {st.hits}, misses = {st.misses}, "
                    f"hit rate = {100.0 * st.hits / st.lookups:.2f}%, uploaded = {st.uploaded_mib:.2f} MiB"
                )
        if self.copied_experts:
            lines.append(
                f"llama_moe_cache: large batches: {self.copied_experts} experts copied from the cache, "
                f"{self.copied_bytes / MIB:.2f} MiB"
            )
        return lines

    def as_dict(self) -> dict:
        return {
            "budget_mib": self.budget_mib,
            "starts": self.starts,
            "groups": [
                {
                    "type": g.type_name,
                    "n_layers": g.n_layers,
                    "n_slots": g.n_slots if self.starts else 0,
                    "percent": round(g.percent, 4) if self.starts else 0.0,
                }
                for g in self.plan.groups
            ],
            "n_slots": self.plan.n_slots_total,
            "small": self.small.as_dict(),
            "large": self.large.as_dict(),
            "hit_rate": self.hit_rate,
            "copied_experts": self.copied_experts,
            "copied_bytes": self.copied_bytes,
            "bypassed_ubatches": self.bypassed_ubatches,
            "decode_tokens": self.decode_tokens,
            "uploaded_bytes_per_token": self.uploaded_bytes_per_token(),
            "log_lines": self.log_lines(),
        } | ({"policy_band": self.band.as_dict()} if self.band else {})


def pool_need(work: Workload) -> np.ndarray:
    """Per record, the slots its group needs for it to use the pool (moe_model.pool_rule)."""
    return _pool_need(work.rec_ntok, work.k, work.n_expert)


def _record_modes(
    in_group: np.ndarray, need: np.ndarray, offloaded: np.ndarray, n_slots: int, copies: bool
) -> np.ndarray:
    """Per record: use the pool, probe it (offloaded large batch), or nothing (get_slot_map rules)."""
    cache = in_group & (need <= n_slots)
    modes = np.where(cache, MODE_CACHE, MODE_SKIP).astype(np.int8)
    if copies:
        modes[in_group & offloaded & ~cache] = MODE_PROBE
    return modes


@dataclass(frozen=True, eq=False)
class _Pass:
    """One kernel pass: a group, the slots that decide which records use its pool, and its budgets."""

    group: int
    n_slots: int
    copies: bool
    budgets: np.ndarray
    state: object


def _pass_plan(plans: list[CachePlan], thresholds: np.ndarray) -> list[tuple[int, int, bool, np.ndarray]]:
    """(group, slots deciding its records, copies, budget indices) of every pass: per group, per class
    of budgets that see the same records (one bit per budget in each entry's mask words)."""
    out = []
    for gi, group in enumerate(plans[0].groups):
        caps = np.array([p.groups[gi].n_slots if p.starts else 0 for p in plans], dtype=np.int64)
        for members in pool_classes(thresholds, caps):
            order = members[np.argsort(caps[members], kind="stable")]  # every budget of a class in one pass
            out.append((gi, int(caps[members[0]]), group.device == OFFLOAD_DEVICE, order))
    return out


@dataclass(frozen=True)
class RunEstimate:
    """What one simulation will take, known before it starts."""

    n_passes: int
    peak_bytes: int  # kernel states and one chunk; the workload itself is extra when held in memory
    seconds: float


def estimate_run(
    stream: WorkloadStream,
    caps_per_pass: list[np.ndarray],
    n_expert: int,
    chunk_records: int,
    kernel: Kernel = LRU_KERNEL,
) -> RunEstimate:
    states = sum(kernel.state_bytes(stream.n_layer, n_expert, np.asarray(caps)) for caps in caps_per_pass)
    per_record = SIM_CHUNK_BYTES_PER_RECORD + len(caps_per_pass)  # every pass's modes span the whole chunk
    ids = min(SIM_CHUNK_LOOKUPS, stream.n_lookups) * SIM_CHUNK_BYTES_PER_ID
    chunk = (min(chunk_records, stream.n_records) * per_record + ids) * (1 + LANE_QUEUE_JOBS)  # queued ones too
    seconds = stream.n_lookups * sum(kernel.ns_per_lookup(len(caps)) for caps in caps_per_pass) * 1e-9
    return RunEstimate(len(caps_per_pass), states + chunk, seconds)


def check_run(estimate: RunEstimate, available: int | None = None) -> None:
    """Refuse, in one line, a run this machine cannot hold or that would run past MAX_SIM_SECONDS."""
    available = available_memory_bytes() if available is None else available
    if available is not None and estimate.peak_bytes > SIM_MEMORY_SHARE * available:
        raise WorkloadError(
            f"this simulation needs about {estimate.peak_bytes / 2**30:.1f} GiB ({estimate.n_passes} kernel passes), "
            f"more than this machine has free ({available / 2**30:.1f} GiB): use fewer budgets"
        )
    if estimate.seconds > MAX_SIM_SECONDS:
        raise WorkloadError(
            f"this simulation would take about {estimate.seconds / 60:.0f} minutes ({estimate.n_passes} passes), "
            f"above this tool's limit of {MAX_SIM_SECONDS // 60} minutes: use fewer budgets or a shorter trace"
        )


def _caps(plans: list[CachePlan], group: int, budgets: np.ndarray) -> np.ndarray:
    return np.array([plans[b].groups[group].n_slots for b in budgets], dtype=np.int64)


def _feed_chunk(
    work: Workload, need: np.ndarray, group: np.ndarray, passes: list[_Pass], k_max: int, lanes: Lanes
) -> None:
    """One chunk of records (`group`: each one's group, -1 for none) to every pass: the same arrays, each pass
    with its own modes (records of other groups skipped, not copied out); the passes are independent, so each
    runs on its own lane (thread: the kernel releases the GIL) at its own pace."""
    large = (work.rec_ntok.astype(np.int64) * work.k > 8 * k_max).astype(np.int8)
    offloaded = copies_from_pool(work.rec_ntok)
    in_group: dict[int, np.ndarray] = {}
    for lane, ps in enumerate(passes):
        if ps.group not in in_group:
            in_group[ps.group] = group == ps.group
        modes = _record_modes(in_group[ps.group], need, offloaded, ps.n_slots, ps.copies)
        if (modes != MODE_SKIP).any():
            args = (work.rec_layer, work.rec_ntok, work.rec_off, modes, large, work.ids)
            lanes.put(lane, (ps.state, *args, work.k, work.n_expert))


def _group_slots(plans: list[CachePlan], n_layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(group of each layer, -1 if none; slots of each group at each budget [n_budgets, n_groups], 0 where the
    plan does not start)."""
    groups = plans[0].groups
    group_of_layer = np.full(n_layer, -1, dtype=np.int64)
    for gi, g in enumerate(groups):
        group_of_layer[list(g.layers)] = gi
    slots = np.array([[g.n_slots if p.starts else 0 for g in p.groups] for p in plans], dtype=np.int64)
    return group_of_layer, slots.reshape(len(plans), len(groups))


def _bypassed_ubatches(work: Workload, need: np.ndarray, group: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Per budget, the ubatches in which at least one cached layer took the large-batch or CPU path: a ubatch
    bypasses where the most slots any of a group's records needs exceeds that group's (nonzero) slots."""
    rows = (group >= 0) & (work.rec_ntok > 0)
    if not rows.any() or not (slots > 0).any() or need[rows].max() <= slots[slots > 0].min():
        return np.zeros(len(slots), dtype=np.int64)  # no record needs more slots than any started group has
    ubatches, which = np.unique(work.rec_ubatch[rows], return_inverse=True)
    most = np.zeros((len(ubatches), slots.shape[1]), dtype=np.int64)
    np.maximum.at(most, (which, group[rows]), need[rows])
    kinds, n = np.unique(most, axis=0, return_counts=True)  # few distinct rows: one per mix of ubatch sizes
    over = (slots[:, None, :] > 0) & (kinds[None, :, :] > slots[:, None, :])
    return over.any(axis=2).astype(np.int64) @ n


def simulate_budgets(
    model: ModelSpec,
    work: Workload | WorkloadStream,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    kernel: Kernel = LRU_KERNEL,
) -> list[SimResult]:
    """Replay `work` at every budget with a policy's kernel (b11549's exact LRU by default); each result equals
    a separate run at that budget.

    The records are streamed through the kernel in chunks of whole ubatches, every pass (one per group and
    class of budgets, all its budgets at once) fed from the same chunk: memory depends on the model and the
    number of budgets, not on the trace length.
    """
    return simulate_plans(model, work, [plan_cache(model, int(b), placement) for b in budgets_mib], kernel)


def simulate_plans(
    model: ModelSpec, work: Workload | WorkloadStream, plans: Sequence[CachePlan], kernel: Kernel = LRU_KERNEL
) -> list[SimResult]:
    """simulate_budgets for cache plans already made (all of one placement): a caller that has them plans nothing
    twice."""
    stream = work if isinstance(work, WorkloadStream) else stream_of(work, SIM_CHUNK_RECORDS)
    stream.check_fits(model.n_layer, model.n_expert, model.n_expert_used)
    plans = list(plans)
    thresholds = np.unique(_pool_need(stream.ntok_values, stream.k, model.n_expert))
    layout = _pass_plan(plans, thresholds[thresholds < NO_POOL])
    caps, n_layer, n_expert = [_caps(plans, gi, b) for gi, _, _, b in layout], stream.n_layer, model.n_expert
    check_run(estimate_run(stream, caps, model.n_expert, SIM_CHUNK_RECORDS, kernel))
    group_keys = [len(g.layers) * n_expert for g in plans[0].groups] if plans else []
    passes = [
        _Pass(gi, n_slots, copies, b, kernel.new_state(c, n_layer, n_expert, group_keys[gi]))
        for (gi, n_slots, copies, b), c in zip(layout, caps, strict=True)
    ]
    group_of_layer, slots = _group_slots(plans, stream.n_layer)
    bypassed = np.zeros(len(plans), dtype=np.int64)
    lanes = _lanes(kernel, len(passes))
    fed = 0
    try:
        for chunk in stream.chunks():
            checkpoint("replaying the cache", fed, stream.n_records)  # a watcher may stop it between chunks
            fed += chunk.n_records
            chunk = chunk.for_model(model.n_expert)
            need = pool_need(chunk)
            # the compiled passes, and the gather by layer below, index without bounds checks
            check_kernel_inputs(
                chunk.rec_layer, chunk.rec_ntok, chunk.rec_off, chunk.ids, chunk.k, chunk.n_expert, chunk.n_layer
            )
            group = group_of_layer[chunk.rec_layer]  # each record's group (-1: none), a gather: np.isin would sort
            _feed_chunk(chunk, need, group, passes, model.n_expert_used, lanes)
            bypassed += _bypassed_ubatches(chunk, need, group, slots)
    except WorkStoppedError:
        lanes.drop_queued()  # stopped: the chunks queued for the passes are not fed
        raise
    finally:
        lanes.close()
    return _results(plans, passes, stream.n_layer, bypassed, stream.decode_tokens, kernel)


def _lanes(kernel: Kernel, n_passes: int) -> Lanes:
    """A lane per pass where its feed may run beside others (one lane: each pass fed inline, in turn)."""
    if kernel.lanes:
        return Lanes(n_passes, kernel.feed)
    if kernel.lane_feed is not None and n_passes > 1:  # the passes share the cores, not each pass's pool sizes
        return Lanes(n_passes, kernel.lane_feed)
    return Lanes(1, kernel.feed)


def _results(
    plans: list[CachePlan], passes: list[_Pass], n_layer: int, bypassed: np.ndarray, decode_tokens: int, kernel: Kernel
) -> list[SimResult]:
    n = len(plans)
    hits = np.zeros((n_layer, 2, n), dtype=np.int64)
    lookups = np.zeros((n_layer, 2, n), dtype=np.int64)
    upload = np.zeros((2, n), dtype=np.int64)
    copied = np.zeros(n, dtype=np.int64)
    copied_bytes = np.zeros(n, dtype=np.int64)
    band = np.zeros((len(kernel.band_readings), 2, n))  # each other reading: hits beyond the default's, bytes spared
    replayed = np.ones(n, dtype=bool)  # budgets every pass replayed the other readings at
    for ps in passes:
        group = plans[0].groups[ps.group]
        h, d, p = kernel.results(ps.state)
        b = ps.budgets
        hits[:, :, b] += h
        lookups[:, :, b] += d[:, :, None]
        upload[:, b] += (d[:, :, None] - h).sum(axis=0) * group.slot_bytes
        copied[b] += p * len(group.tensor_bytes)
        copied_bytes[b] += p * group.slot_bytes
        if kernel.band is not None:
            others, sampled = kernel.band(ps.state)
            more = others - h.sum(axis=(0, 1))
            replayed[b] &= sampled
            band[:, 0, b] += more
            band[:, 1, b] += more * group.slot_bytes
    out = []
    for b, plan in enumerate(plans):
        small, large = (
            ClassStats(int(hits[:, c, b].sum()), int((lookups - hits)[:, c, b].sum()), int(upload[c, b]))
            for c in (0, 1)
        )
        out.append(
            SimResult(
                plan.budget_mib,
                plan,
                small,
                large,
                int(copied[b]),
                int(copied_bytes[b]),
                int(bypassed[b]),
                hits[:, :, b].sum(axis=1),
                lookups[:, :, b].sum(axis=1),
                decode_tokens,
                _band_at(kernel, small, large, band[:, :, b], decode_tokens, bool(replayed[b])),
                kernel.name,
            )
        )
    return out


def _band_at(
    kernel: Kernel, small: ClassStats, large: ClassStats, extra: np.ndarray, tokens: int, replayed: bool
) -> PolicyBand | None:
    """One budget's band: each other reading's hits are the default's plus `extra[:, 0]`."""
    if kernel.band is None:
        return None
    hits, lookups = small.hits + large.hits, small.lookups + large.lookups
    uploaded = small.uploaded_bytes + large.uploaded_bytes
    per_reading = np.stack([hits + extra[:, 0], extra[:, 1]], axis=1)
    return policy_band(hits, lookups, uploaded, per_reading, kernel.band_readings, tokens, replayed)


def simulate(
    model: ModelSpec, work: Workload, budget_mib: int, placement: Placement | None = None, kernel: Kernel = LRU_KERNEL
) -> SimResult:
    """Replay `work` at one budget."""
    return simulate_budgets(model, work, [budget_mib], placement, kernel)[0]
