"""llama.cpp b12191 `--moe-cache-cpu-share F` as a *modelled* policy: its exact formulas were not available.

What is known (docs/llamacpp-cache.md section 10: llama.cpp's docs/moe-cache.md at tag b12191, PR #30966): hits run
on the GPU; once a group's slots are all filled, a share F of the misses is computed on the CPU from host memory and
not inserted; the count is kept on target with an accumulated remainder; the misses sent to the CPU are those with
the lowest combined recency-frequency (CRF) score. Before the pool is full every miss is uploaded. A later vendored
`src/llama-moe-cache.h` (section 10) marks the CPU part per (token, chosen expert): `cpu_ids`, the misses computed
from the host experts and -1 for the rest, beside the slots, so the share splits a step's missed *selections*
(split_selections): an expert all of whose selections go to the CPU is never uploaded, one the split cuts through
is uploaded for its other selections. Layers whose router weights scale the expert input (weight_before_ffn) are
priced without the share (share_applies).
From b12170 the cache under it is ClassLRU (issue 20), so this runs on ClassLRU's lists and CRF (policies.class_lru,
its knobs at their defaults): share 0 gives ClassLRU's counts. Every pool size of a class of budgets in one pass per
group (base.per_class).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moe_model.limits import SIM_CHUNK_RECORDS
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_SKIP
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_class
from moe_model.policies.knobs import SHARE
from moe_model.progress import checkpoint
from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import DEFAULT_CPU_SHARE
from moe_model.workload import Workload

# llama.cpp b11549 src/llama-graph.cpp build_moe_ffn: `weight_before_ffn = arch == LLM_ARCH_LLAMA4` ("llama4" in
# src/llama-arch.cpp): the router weights scale the expert input, a layout the CPU path is not modelled for
WEIGHT_BEFORE_FFN_ARCHS = ("llama4",)
# where llama.cpp does not apply the share, as predictions and simulate name it: the router weights before the FFN
# (a GGUF's architecture), and a LoRA adapter on the experts (build_lora_mm_id adds its product over every selected
# expert on the device path; the project takes no adapter, so it never prices one)
NOT_APPLIED = ("a router weight before the FFN (weight_before_ffn: llama4)", "a LoRA adapter on the experts (--lora)")


def share_applies(model: ModelSpec) -> bool:
    """Whether the CPU share applies to the model's cached layers: not where the router weights scale the expert
    input (weight_before_ffn, a property of the GGUF's general.architecture)."""
    return model.architecture not in WEIGHT_BEFORE_FFN_ARCHS


def share_note(model: ModelSpec) -> str:
    """The line predictions and simulate carry where a CPU share is asked: where it does not apply, and this model."""
    if not share_applies(model):
        return (
            f"the CPU share does not apply to this {model.architecture} model ({NOT_APPLIED[0]}): priced without "
            "it, every miss uploaded"
        )
    return f"the CPU share splits every cached layer's misses; it would not apply to {' nor '.join(NOT_APPLIED)}"


@dataclass(frozen=True)
class SelectionSplit:
    """One step's missed selections split by the share: experts (indices into the step's misses) all of whose
    selections the CPU computes, the expert the split cuts through (or None), the selections sent, the remainder."""

    cpu_only: tuple[int, ...]
    cut: int | None
    cpu_selections: int
    remainder: float


def split_selections(selections: Sequence[int], share: float, remainder: float) -> SelectionSplit:
    """The readable rule the kernel (class_lru._share_split) follows: `selections[i]` are the tokens that chose the
    step's i-th missed expert, lowest CRF first. The share of all of them plus the carried remainder, rounded down,
    goes to the CPU, whole experts first in that order; what rounding leaves carries to the next step."""
    owed = remainder + share * sum(selections)
    left = min(sum(selections), int(owed))
    owed -= left
    sent, cpu_only, cut = left, [], None
    for i, n in enumerate(selections):
        if left == 0:
            break
        if n <= left:
            cpu_only.append(i)
        else:
            cut = i
        left -= min(left, n)
    return SelectionSplit(tuple(cpu_only), cut, sent, owed)


def share_sizes(
    work: Workload, use: np.ndarray, slots: np.ndarray, share: float, group_keys: int | None = None
) -> np.ndarray:
    """The records `use` through ClassLRU pools of every size in `slots` with the share: [len(slots), 4, n_layer]
    counts (hits, uploads, CPU-only, cut: uploaded and also computed on the CPU); fed in chunks, as simulate
    streams them. `group_keys`: the group's layers x n_expert (its list pools: class_lru.new_state)."""
    order = np.argsort(slots, kind="stable")
    state = class_lru.new_state(np.asarray(slots)[order], work.n_layer, work.n_expert, share, group_keys)
    mode = np.where(use, MODE_CACHE, MODE_SKIP).astype(np.int8)
    large = np.zeros(work.n_records, dtype=np.int8)  # the <= 8 / > 8 split is not a policy count
    for lo in range(0, work.n_records, SIM_CHUNK_RECORDS):
        checkpoint("replaying the cache", lo, work.n_records)  # a watcher may stop it between chunks
        rows = slice(lo, lo + SIM_CHUNK_RECORDS)
        args = (work.rec_layer[rows], work.rec_ntok[rows], work.rec_off[rows], mode[rows], large[rows], work.ids)
        class_lru.feed(state, *args, work.k, work.n_expert)
    hits, distinct, _ = class_lru.results(state)
    hits, (cpu, cut, _) = hits.sum(axis=1), class_lru.cpu_counts(state)  # [n_layer, n_caps]
    counts = np.stack([hits, distinct.sum(axis=1)[:, None] - hits - cpu, cpu, cut])  # [4, n_layer, n_caps]
    out = np.empty((len(slots), 4, work.n_layer), dtype=np.int64)
    out[order] = np.moveaxis(counts, -1, 0)
    return out


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    share: float = DEFAULT_CPU_SHARE,
) -> list[PolicyResult]:
    """Once a group's pool is full, a share of its missed selections (the lowest CRF first) is computed on the CPU;
    a model the share does not apply to runs without it (share_applies). Every budget of a class in one pass per
    group, its pool sizes on numba's threads."""
    share = share if share_applies(model) else 0.0
    return per_class(
        model,
        work,
        budgets_mib,
        placement,
        lambda w, layers, use, slots: share_sizes(w, use, slots, share, len(layers) * w.n_expert),
    )


POLICY = Policy(
    "cpu-share-b12191",
    MODELLED,
    "llama.cpp b12191 docs/moe-cache.md (PR #30966) on b12170's ClassLRU; docs/llamacpp-cache.md section 10",
    "ClassLRU (b12170+), but once the pool is full a share of the missed (token, chosen expert) selections, the "
    "lowest CRF first, runs on the CPU beside the GPU; an expert all of whose selections go there is not uploaded",
    run,
    (SHARE,),
    lambda share=DEFAULT_CPU_SHARE: share,  # once the pool is full (always, at a hit rate below 100 %)
    notes=lambda model: (share_note(model),),  # where the share does not apply, and whether this model is one
)
