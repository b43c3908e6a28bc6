"""A static hot set: each group's slots pinned to the experts most often looked up in a profile workload
(all of it, or the profiled part of a trace), then never evicted; other experts run on the CPU.

Each pinned expert is uploaded at its first lookup (the bytes a preload at start-up would cost), so, like
every other policy, it starts cold. Profiling on one part of a trace and replaying another shows how static
pinning fares when routing drifts; profiling the replayed workload itself flatters it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from moe_model.llama.slot_plan import GroupPlan, Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_budget
from moe_model.policies.entries import PoolEntries
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import PHASE_DECODE, Workload


def hot_set(profile: PoolEntries, n_slots: int) -> np.ndarray:
    """The n_slots keys looked up in most profile records (ties: lower key)."""
    counts = np.bincount(profile.key)
    keys = np.flatnonzero(counts)
    return keys[np.argsort(-counts[keys], kind="stable")[:n_slots]]


def replay(entries: PoolEntries, pinned: np.ndarray, n_layer: int):
    """Per layer: hits (pinned, already uploaded), uploads (first lookup of a pinned key), CPU (not pinned)."""
    is_pinned = np.isin(entries.key, pinned)
    first = np.zeros(len(entries.key), dtype=bool)
    first[np.flatnonzero(is_pinned)[np.unique(entries.key[is_pinned], return_index=True)[1]]] = True
    layer = entries.layer
    count = [np.bincount(layer[m], minlength=n_layer) for m in (is_pinned & ~first, first, ~is_pinned)]
    return tuple(c.astype(np.int64) for c in count)


def split_workload(work: Workload, share: float) -> tuple[Workload, Workload]:
    """(the first `share` of the ubatches, the rest): a profile part and a replay part of one trace."""
    cut = int(np.searchsorted(work.rec_ubatch, int(work.n_ubatches * share)))
    tail_decode = _decode_tokens(work, cut)
    head = replace(work.prefix(cut), decode_tokens=work.decode_tokens - tail_decode)
    ids_cut = int(work.rec_off[cut]) if cut < work.n_records else len(work.ids)
    tail = Workload(
        work.n_layer,
        work.n_expert,
        work.k,
        work.rec_ubatch[cut:] - (work.rec_ubatch[cut] if cut < work.n_records else 0),
        work.rec_layer[cut:],
        work.rec_ntok[cut:],
        work.rec_off[cut:] - ids_cut,
        work.rec_phase[cut:],
        work.ids[ids_cut:],
        tail_decode,
        work.label,
    )
    return head, tail


def _decode_tokens(work: Workload, cut: int) -> int:
    first = (work.rec_phase[cut:] == PHASE_DECODE) & (work.rec_layer[cut:] == 0)
    return int(work.rec_ntok[cut:][first].sum())


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    profile: Workload | None = None,
) -> list[PolicyResult]:
    """profile: the workload the hot set is chosen from (default: `work` itself, in-sample)."""
    entries = PoolEntries.build(work.for_model(model.n_expert))
    prof = entries if profile is None else PoolEntries.build(profile.for_model(model.n_expert))

    def group(w: Workload, g: GroupPlan, use: np.ndarray):
        pinned = hot_set(prof.select(g.layers, g.n_slots), g.n_slots)
        return replay(entries.select(g.layers, g.n_slots), pinned, w.n_layer)

    return per_budget(model, work, budgets_mib, placement, group)


POLICY = Policy(
    "static-hot-set",
    MODELLED,
    "static expert pinning from a routing profile (as with -ot placement of hot experts)",
    "slots pinned to the experts most often looked up in a profile; the others run on the CPU",
    run,
    {"profile": None},
)
