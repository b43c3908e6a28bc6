"""What every replacement policy takes and returns, and the per-group driver most of them share.

A policy replays a workload through llama.cpp's per-group slot pools (groups from slot_plan.plan_cache)
at each budget. Which records use a pool is the same for every policy (moe_model.pool_rule), so every
policy sees the same lookups: the distinct experts of each pool record, as llama.cpp counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import NO_POOL, pool_classes, pool_need, uses_pool
from moe_model.llama.slot_plan import Placement, plan_cache
from moe_model.policies.knobs import Knob
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload

EXACT, MODELLED = "exact", "modelled"


@dataclass(frozen=True, eq=False)
class PolicyResult:
    """Per-layer counts at one budget: hits, misses uploaded into the pool, misses served without being
    kept (computed on the CPU from host memory). hits + uploads + cpu = the distinct experts looked up."""

    budget_mib: int
    starts: bool
    hits: np.ndarray  # [n_layer]
    uploads: np.ndarray
    cpu: np.ndarray
    cpu_cut: np.ndarray | None = None  # uploads the CPU share also computes for some selections (policies.cpu_share)

    @property
    def lookups(self) -> np.ndarray:
        return self.hits + self.uploads + self.cpu

    @property
    def hit_rate(self) -> float | None:
        total = int(self.lookups.sum())
        return int(self.hits.sum()) / total if total else None

    def as_dict(self) -> dict:
        return {
            "budget_mib": self.budget_mib,
            "starts": self.starts,
            "hit_rate": self.hit_rate,
            "hits": int(self.hits.sum()),
            "misses": int(self.uploads.sum() + self.cpu.sum()),
            "uploads": int(self.uploads.sum()),
            "cpu": int(self.cpu.sum()),
        } | ({} if self.cpu_cut is None else {"cpu_cut": int(self.cpu_cut.sum())})


Runner = Callable[..., list[PolicyResult]]  # (model, work, budgets_mib, placement, **knobs)


@dataclass(frozen=True)
class Policy:
    """A registered replacement policy: `run(model, work, budgets_mib, placement, **knobs)`."""

    name: str
    label: str  # EXACT (reproduces a documented implementation) or MODELLED (our reading of a description)
    source: str
    summary: str
    run: Runner
    declared: tuple[Knob, ...] = ()  # its tunable parameters: defaults, bounds, help
    cpu_fraction: Callable[..., float] = lambda **knobs: 0.0  # misses served on the CPU, when only a rate is known
    kernel: Callable[..., object] | None = None  # knobs -> a simulate Kernel: runs like the exact LRU (streamed)
    band_kernel: Callable[[], object] | None = None  # a modelled policy's kernel with its other readings (a band)
    notes: Callable[[ModelSpec], tuple[str, ...]] = lambda model: ()  # caveats simulate prints beside its counts

    @property
    def knobs(self) -> dict[str, object]:
        """Each knob's default, by name."""
        return {k.name: k.default for k in self.declared}

    def own_knobs(self, knobs: Iterable[tuple[str, object]]) -> dict[str, object]:
        """Those of `knobs` (name, value) this policy declares, each checked against its declaration."""
        declared = {k.name: k for k in self.declared}
        return {name: declared[name].check(value) for name, value in knobs if name in declared}

    def describe(self) -> dict:
        return {"name": self.name, "label": self.label, "source": self.source, "knobs": dict(self.knobs)}


ClassPass = Callable[[Workload, tuple[int, ...], np.ndarray, np.ndarray], np.ndarray]


def per_class(
    model: ModelSpec, work: Workload, budgets_mib: Sequence[int], placement: Placement | None, class_pass: ClassPass
) -> list[PolicyResult]:
    """Each cached group's budgets whose pools admit the same records (pool_rule.pool_classes) go to
    `class_pass(work, layers, use, slots)` together: `use` marks those records, `slots` are the pool sizes; it
    returns [len(slots), 3, n_layer] counts (hits, uploads, CPU; a 4th row: PolicyResult.cpu_cut), sharing its
    preparation or its pass."""
    work.check_fits(model.n_layer, model.n_expert, model.n_expert_used)
    work = work.for_model(model.n_expert)
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, work.n_expert, work.n_layer)
    plans = [plan_cache(model, int(b), placement) for b in budgets_mib]
    counts = None  # sized by the first pass's rows
    needs = np.unique(pool_need(work.rec_ntok, work.k, model.n_expert))
    for gi, group in enumerate(plans[0].groups if plans else ()):
        slots = np.array([p.groups[gi].n_slots if p.starts else 0 for p in plans], dtype=np.int64)
        in_group = np.isin(work.rec_layer, np.array(group.layers))
        for members in pool_classes(needs[needs < NO_POOL], slots):
            use = in_group & uses_pool(work.rec_ntok, work.k, model.n_expert, int(slots[members[0]]))
            got = class_pass(work, group.layers, use, slots[members])
            counts = np.zeros((len(plans), *got.shape[1:]), dtype=np.int64) if counts is None else counts
            counts[members] += got
    counts = np.zeros((len(plans), 3, model.n_layer), dtype=np.int64) if counts is None else counts
    return [PolicyResult(p.budget_mib, p.starts, *counts[b]) for b, p in enumerate(plans)]
