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

from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_class
from moe_model.policies.entries import PoolEntries
from moe_model.policies.knobs import Knob
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import PHASE_DECODE, Workload, first_layer


def hot_ranks(profile: PoolEntries, n_keys: int) -> np.ndarray:
    """Per key, its place among the keys looked up in most profile records (ties: lower key first); keys the
    profile never looks up come last. A pool of n slots pins the keys of rank < n."""
    counts = np.bincount(profile.key, minlength=n_keys)[:n_keys]  # a profile of more layers: only these count
    keys = np.flatnonzero(counts)
    rank = np.full(n_keys, n_keys, dtype=np.int64)
    rank[keys[np.argsort(-counts[keys], kind="stable")]] = np.arange(len(keys))
    return rank


def replay(uses: np.ndarray, rank: np.ndarray, n_slots: int, n_layer: int) -> np.ndarray:
    """Per layer: hits (pinned, already uploaded), uploads (first lookup of a pinned key), CPU (not pinned),
    from each key's number of lookups `uses` (a pinned key looked up n times: 1 upload, n - 1 hits)."""
    pinned = rank < n_slots
    per_key = np.stack([np.where(pinned, np.maximum(uses - 1, 0), 0), pinned & (uses > 0), np.where(pinned, 0, uses)])
    return per_key.reshape(3, n_layer, -1).sum(axis=2)


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
    first = (work.rec_phase[cut:] == PHASE_DECODE) & first_layer(work.rec_layer[cut:])
    return int(work.rec_ntok[cut:][first].sum())


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    profile: Workload | None = None,
) -> list[PolicyResult]:
    """profile: the workload the hot set is chosen from (default: `work` itself, in-sample). Each group's
    lookups are counted per key once per class of budgets; each budget then pins its top keys."""
    entries = PoolEntries.build(work.for_model(model.n_expert))
    prof = entries if profile is None else PoolEntries.build(profile.for_model(model.n_expert))
    n_keys = model.n_layer * model.n_expert

    def sizes(w: Workload, layers: tuple[int, ...], use: np.ndarray, slots: np.ndarray) -> np.ndarray:
        uses = np.bincount(entries.select(layers, int(slots[0])).key, minlength=n_keys)
        rank = hot_ranks(prof.select(layers, int(slots[0])), n_keys)
        return np.array([replay(uses, rank, int(s), w.n_layer) for s in slots])

    return per_class(model, work, budgets_mib, placement, sizes)


POLICY = Policy(
    "static-hot-set",
    MODELLED,
    "static expert pinning from a routing profile (as with -ot placement of hot experts)",
    "slots pinned to the experts most often looked up in a profile; the others run on the CPU",
    run,
    (Knob("profile", None, "the workload the hot set is chosen from (default: the replayed one, in-sample)"),),
    notes=lambda model: ("hot set chosen on the replayed workload itself (in-sample: flatters static pinning)",),
)
