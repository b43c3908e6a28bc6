"""Compare placements, budgets, load modes and CPU shares for a model on a machine; the best with its command.

One recommender for the CLI, Explore's "best setting" and Shopping: the same inputs give the same answer.
Options that do not start or do not fit the GPU's memory or the host's RAM are never picked. A modelled policy
(CPU share) is only picked when it beats the best exact option by more than the prediction's uncertainty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from moe_model.answers.usability import usability
from moe_model.answers.verdict import CacheVerdict, cache_verdict
from moe_model.llama.builds import has_cache, has_cpu_share
from moe_model.llama.slot_plan import Placement, full_budget_mib, min_budget_mib
from moe_model.numba_cache import parallel_kernels_may_overlap
from moe_model.policies import EXACT, get_policy
from moe_model.policies.knobs import SHARE
from moe_model.pricing.curve import ReplayMemo, price, replay
from moe_model.progress import checkpoint, watched_steps
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import prompt_knobs, window_distinct
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.range_inputs import NO_RANGE, RangeInputs
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Scenario, cache_room_mib, fit_layers
from moe_model.speed.server_command import command_line
from moe_model.speed.streams import per_stream_tps
from moe_model.speed.time_model import Prediction
from moe_model.threads import worker_pool
from moe_model.workload import Workload

CPU_SHARES = (0.5, 0.95)
N_BUDGETS = 6
DEFAULT_LOAD_MODE = Scenario().load_mode  # the --fit and --n-cpu-moe candidates' without --load-mode


@dataclass(frozen=True, eq=False)
class Option:
    label: str
    prediction: Prediction
    command: str
    cache: CacheVerdict  # against the same placement without a cache

    @property
    def host(self) -> HostMemory:
        """The RAM account of the option's layout."""
        return self.prediction.layout.ram

    @property
    def verdict(self) -> str:
        """The verdict's word: helps, hurts, too close to call (on current builds), no cache or does not fit."""
        return self.cache.word

    @property
    def usable(self) -> bool:
        """Runs (Layout.runs: starts, and fits RAM or its mmap'd experts stream from disk at the speed the disk term
        prices) and fits VRAM with llama.cpp's margin (never a too-close one): only then is it picked."""
        return self.prediction.layout.runs and self.prediction.vram.fits

    def as_dict(self) -> dict:
        p = self.prediction
        return {
            "label": self.label,
            "usable": self.usable,
            "decode_tps": p.decode_tps,
            "decode_tps_range": list(p.decode_tps_range),
            "decode_tps_per_stream": per_stream_tps(p.decode_tps, p.scenario.concurrency),  # decode_tps: the total
            "prefill_tps": p.prefill_tps,
            "ttft_s": p.ttft_s,
            "depth": p.scenario.context_depth,
            "hit_rate": p.hit_rate,
            "policy_band": p.policy_band.as_dict() if p.policy_band else None,  # None: an exact policy
            "starts": p.starts,
            "fits_vram": p.vram.fits,
            "vram_free_mib": p.vram.free_mib,
            "fits_ram": self.host.fits,
            "streams_from_disk": self.host.streams,
            "ram_needed_mib": self.host.used_mib,
            **self.cache.as_dict(),
            **(usability(p).as_dict() if self.usable else {"usability": None, "usability_line": None}),
            "command": self.command,
            "scenario": p.as_dict()["scenario"],
        } | p.scenario.policy_fields()


def request_of(sc: Scenario) -> Scenario:
    """What the recommender reads of a page's scenario: the request, the memory flags, the build and reading, the
    CPU share and the devices (-ngl, GPUs, split); not the placement, budget and load mode it chooses itself (one
    answer for every setting a page shows, so that applying the pick leaves the pick as it was: its --fit and
    --n-cpu-moe candidates at `recommend`'s default load mode)."""
    return replace(sc, placement=_placement(sc), budget_mib=0, load_mode=DEFAULT_LOAD_MODE)


def _placement(base: Scenario, **fields) -> Placement:
    p = base.placement
    return Placement(n_gpu_layers=p.n_gpu_layers, n_gpus=p.n_gpus, tensor_split=p.tensor_split, **fields)


def candidates(model: ModelSpec, hw: Hardware, base: Scenario) -> list[Scenario]:
    """--fit, --fit + 10 % cache, --cpu-moe over budgets (mmap and pinned), --n-cpu-moe K + budget, CPU shares:
    those the build has (no cache before b11480, no CPU share before b12191). The --cpu-moe budgets are the
    model's budget_grid below the largest that fits this card, and that one: cards share every other."""
    cache, share = has_cache(base.build), has_cpu_share(base.build)
    share &= set(dict(base.knobs)) <= {SHARE.name}  # a ClassLRU reading given: the CPU share's policy has none
    shares = sorted({*CPU_SHARES, base.cpu_share} - {0.0})  # the user's own share beside the two offered
    base = replace(base.with_knobs({SHARE.name: 0.0}), budget_mib=0)  # each candidate sets its own
    fit = _placement(base, cpu_moe=False, fit=True)
    out = [replace(base, placement=fit)]
    k_fit = fit_layers(model, hw, base, fit)
    host_mib = sum(layer.expert_bytes_total for layer in model.layers[:k_fit]) / 2**20
    if cache and k_fit and min_budget_mib(model, _placement(base, cpu_moe=False, n_cpu_moe=k_fit)):
        out.append(replace(base, placement=fit, budget_mib=max(int(host_mib * 0.1), 1)))
    cpu_moe = _placement(base, cpu_moe=True)
    lo = min_budget_mib(model, cpu_moe) or 0
    hi = cache_room_mib(model, hw, base, cpu_moe)
    top, grid = max(hi, lo), budget_grid(model, cpu_moe)  # below the smallest that starts: that one, not fitting
    budgets = sorted({b for b in grid if b < top} | {top, 0}) if cache else [0]
    for mode in ("mmap", "none"):
        out += [replace(base, placement=cpu_moe, budget_mib=b, load_mode=mode) for b in budgets if b == 0 or b >= lo]
    for k in sorted({max(1, k_fit), (k_fit + model.n_layer) // 2}):
        placement = _placement(base, cpu_moe=False, n_cpu_moe=k)
        budget = cache_room_mib(model, hw, base, placement)
        lowest = min_budget_mib(model, placement)
        out.append(replace(base, placement=placement))
        if cache and lowest and budget >= lowest:
            out.append(replace(base, placement=placement, budget_mib=budget))
    half = max((b for b in grid if b <= hi // 2), default=lo)  # on the shared grid: other cards replayed it too
    for b in (hi, half) if share else ():
        if b >= lo > 0:
            out += [replace(base.with_knobs({SHARE.name: f}), placement=cpu_moe, budget_mib=b) for f in shares]
    return out


def budget_grid(model: ModelSpec, placement: Placement) -> tuple[int, ...]:
    """The budgets every card's --cpu-moe candidates share (N_BUDGETS, geometric from the smallest that starts to
    the one that caches every expert): one curve per placement across cards, each card adding only the largest
    budget that fits it (its own VRAM)."""
    lo = min_budget_mib(model, placement) or 1
    full = full_budget_mib(model, placement) or lo
    return tuple(sorted({int(b) for b in np.geomspace(lo, max(full, lo), N_BUDGETS)}))


def label(sc: Scenario, placement: Placement) -> str:
    cache = f" + {sc.budget_mib} MiB cache" if sc.budget_mib else " (no cache)"
    share = f", CPU share {sc.cpu_share:g} ({get_policy(sc.policy_name).label} policy)" if sc.cpu_share else ""
    pinned = ", pinned host experts (--load-mode none)" if sc.pinned else ""
    return placement.label + cache + pinned + share


def recommend(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    workload_for: Callable[[Scenario], Workload],
    model_path: str,
    ranges: RangeInputs = NO_RANGE,
    progress=None,
) -> list[Option]:
    """Every candidate's prediction, best first (those that start and fit the GPU's memory and the RAM), each at
    `base`'s request (streams, draft tokens and acceptance, context, prompt, depth, build). `workload_for` may be a
    ReplayMemo: budgets it has already replayed (for another card) are reused; it is called from threads at once
    (a ReplayMemo or a threads.cache_once function builds the workload once)."""
    _prefetch_prompt_routing(model)
    if has_cache(base.build):  # every candidate replays the base's workload: built while the candidates are made
        _in_background(lambda: workload_for(base), "workload")
    scenarios = candidates(model, hw, base)
    preds = _predictions(model, hw, params, scenarios, workload_for, ranges, progress)
    baselines = {(p.layout.placement, p.scenario.load_mode): p for p in preds if p.scenario.budget_mib == 0}
    options = []
    for p in preds:
        base_pred = baselines.get((p.layout.placement, p.scenario.load_mode))
        options.append(
            Option(
                label(p.scenario, p.layout.placement),
                p,
                command_line(model_path, p.scenario, p.layout.placement),
                cache_verdict(p, base_pred),
            )
        )
    return rank(options, ranges.rel_error)


def _prefetch_prompt_routing(model: ModelSpec) -> None:
    """The prompt routing curve every prediction prices (cached once per routing), computed on a thread while the
    candidates replay: the replays release the GIL, and their single-threaded parts leave a core idle."""
    _in_background(lambda: window_distinct(model.n_expert, model.n_expert_used, prompt_knobs(model), 1), "routing")


def _in_background(compute: Callable[[], object], name: str) -> None:
    """compute() on a thread, for a cache its caller's own call later finds filled (or fills, after a failure: not
    kept, that call computes it again and says why)."""

    def run() -> None:
        try:
            compute()
        except Exception:  # noqa: BLE001 - see above
            return

    threading.Thread(target=run, name=name, daemon=True).start()


def replay_shared(model: ModelSpec, hardware: Sequence[Hardware], base: Scenario, memo: ReplayMemo) -> None:
    """Into the memo: the settings of the build's own policy (the exact LRU or ClassLRU: every budget of a class
    in one pass) several cards share (the same placement), at the union of their budgets, in one pass each (the
    counts do not depend on the card)."""
    shared: dict[Scenario, set[int]] = {}
    users: dict[Scenario, int] = {}
    for hw in hardware:
        for group, budgets in _groups(candidates(model, hw, base)).items():
            if not group.placement.fit and group.kernel() is not None:  # --fit moves with the card's VRAM
                shared.setdefault(group, set()).update(budgets)
                users[group] = users.get(group, 0) + 1
    for group, budgets in watched_steps("replaying what the cards share", list(shared.items())):
        if users[group] > 1:
            replay(model, hardware[0], group, sorted(budgets), memo)


def _groups(scenarios: Sequence[Scenario]) -> dict[Scenario, list[int]]:
    """Candidates that differ only in budget and load mode (their counts do not depend on the load mode)."""
    groups: dict[Scenario, list[int]] = {}
    for sc in scenarios:
        groups.setdefault(replace(sc, budget_mib=0, load_mode="mmap"), []).append(sc.budget_mib)
    return groups


def _predictions(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    scenarios: list[Scenario],
    workload_for: Callable[[Scenario], Workload],
    ranges: RangeInputs,
    progress=None,
) -> list[Prediction]:
    """Each candidate through the curve pipeline: candidates that differ only in budget and load mode share one
    replay (a curve over their budgets), priced for each load mode (the counts do not depend on it). The groups
    replay on threads (their kernels release the GIL), each priced here as soon as it and those before it are
    replayed."""
    groups: dict[Scenario, list[int]] = {}
    for i, sc in enumerate(scenarios):
        groups.setdefault(replace(sc, budget_mib=0, load_mode="mmap"), []).append(i)
    out: list[Prediction | None] = [None] * len(scenarios)
    jobs = [(group, sorted({scenarios[i].budget_mib for i in members})) for group, members in groups.items()]
    with worker_pool(len(jobs) if parallel_kernels_may_overlap() else 1) as pool:  # their kernels may be parallel
        replays = [_replay_job(pool, model, hw, group, budgets, workload_for) for group, budgets in jobs]
        for n, (members, replayed) in enumerate(zip(groups.values(), replays, strict=True)):
            checkpoint("pricing each setting", n, len(groups))  # a watcher may stop it (the replays check too)
            _price_group(model, hw, params, scenarios, members, replayed(), ranges, out)
            if progress:
                progress((n + 1) / len(groups))
    return out


def _replay_job(pool, model: ModelSpec, hw: Hardware, group: Scenario, budgets: list[int], workload_for) -> Callable:
    """The group's replay, started on the pool where there is one; calling the result waits for it."""
    if pool is None:
        return lambda: replay(model, hw, group, budgets, workload_for)
    return pool.submit(replay, model, hw, group, budgets, workload_for).result


def _price_group(model, hw, params, scenarios, members, replayed, ranges, out: list) -> None:
    """A group's replayed budgets priced for each load mode its members ask for, into `out`."""
    for mode in sorted({scenarios[i].load_mode for i in members}):
        priced = price(model, hw, params, replayed, ranges, load_mode=mode)
        for i in members:
            if scenarios[i].load_mode == mode:
                out[i] = priced.at(scenarios[i].budget_mib).prediction


def _exact(sc) -> bool:
    return get_policy(sc.policy_name).label == EXACT


def rank(options: list[Option], rel_error: float) -> list[Option]:
    """Usable options fastest first; a modelled-policy option leads only if it wins by more than the error."""
    ok = sorted((o for o in options if o.usable), key=lambda o: -o.prediction.decode_tps)
    exact = [o for o in ok if _exact(o.prediction.scenario)]
    leader = ok[0].prediction if ok else None
    if exact and not _exact(leader.scenario) and leader.decode_tps <= exact[0].prediction.decode_tps * (1 + rel_error):
        ok.remove(exact[0])
        ok.insert(0, exact[0])
    return ok + [o for o in options if not o.usable]
