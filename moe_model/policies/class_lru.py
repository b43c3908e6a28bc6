"""llama.cpp b12170+ ClassLRU (PR #31233): one LRU list per frequency class over a group's slots.

Modelled from the opening comment of `src/llama-moe-cache.cpp` at ggml-org/llama.cpp commit c4fb5796 (its
state declarations were readable, its plan() body was not; ../shared/docs/llamacpp-moe-cache.md section 10):
- per (layer, expert) a CRF (combined recency and frequency): its uses, decayed with a half-life of 128 tokens,
  kept across evictions (`crf[n_layer * n_expert]`, `last_use[...]`: "layer clock at the last use");
- class = floor(log2(CRF)), at most n_class - 1, n_class = 8 (the class of CRF_max = 1 / (1 - 2^(-1/128)));
- a slot sits in the LRU list of its class as of its last use;
- victim: an empty slot, else among the least recently used slots of the lists not in the current plan(), the
  one with the largest age / 2^class; the clock advances by the real token count of each ubatch.
The rest is b11549's plan() (hits refreshed first in first-appearance order, then sorted misses) and its
get_slot_map rule. What the comment leaves open is a knob, defaulting to its most literal reading:
- `clock`: "layer" (one clock per layer, advanced by the record's tokens at each plan() of that layer: ages in
  tokens, as the CRF_max derivation assumes) or "group" (one clock for the group, advanced at every plan():
  ages in layer steps);
- `increment`: CRF added per use (hit or miss), 1;
- `ties`: "low-class" (equal scores: the lower class is evicted) or "high-class".

The curve is one pass per group and class of budgets that see the same records: the CRF, its class and the
clock depend only on the lookups, so they are computed once per chunk and every budget's lists replay them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import floor, log2

import numpy as np
from numba import njit

from moe_model.errors import MoeModelError
from moe_model.limits import CLASS_LRU_NS_PER_LOOKUP_BUDGET, SIM_NS_PER_LOOKUP_PASS
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP
from moe_model.llama.simulate import Kernel, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult
from moe_model.policies.lru import from_simulation
from moe_model.readers.model_spec import ModelSpec

HALF_LIFE_TOKENS = 128.0  # crf_half_life in the source
N_CLASSES = 8  # n_class in the source
CLOCKS = ("layer", "group")
TIES = ("low-class", "high-class")
KNOBS = {"half_life_tokens": HALF_LIFE_TOKENS, "n_classes": N_CLASSES, "increment": 1.0, "clock": "layer",
         "ties": "low-class"}  # fmt: skip


def crf_class(crf: float, n_classes: int = N_CLASSES) -> int:
    """floor(log2(CRF)) capped to 0..n_classes - 1 (a CRF below 1 only with an increment below 1)."""
    return min(n_classes - 1, max(0, floor(log2(crf)))) if crf > 0 else 0


def decayed(crf: float, age_tokens: float, half_life_tokens: float = HALF_LIFE_TOKENS) -> float:
    """The source's decayed_crf: the CRF `age_tokens` after its last use."""
    return crf * 2.0 ** (-age_tokens / half_life_tokens)


@dataclass(frozen=True, eq=False)
class ClassLruState:
    """One pass's state between chunks: the shared CRF and clocks, and per pool size its slots and lists."""

    caps: np.ndarray
    offsets: np.ndarray  # first slot of each pool size
    half_life: float
    n_classes: int
    increment: float
    group_clock: bool
    ties_high: bool
    crf: np.ndarray  # [n_keys]
    last_use: np.ndarray  # [n_keys] clock at the last use, -1 before the first
    clock: np.ndarray  # [n_layer] (index 0 only with group_clock)
    tick: np.ndarray  # [1] records planned before this chunk
    slot_of: np.ndarray  # [n_caps, n_keys]
    key_of: np.ndarray  # [total slots]
    prev: np.ndarray
    nxt: np.ndarray
    cls_of: np.ndarray  # class list the slot sits in
    t_of: np.ndarray  # clock of the slot's last use
    rec_of: np.ndarray  # record (tick) of the slot's last use: the untouched-list rule
    head: np.ndarray  # [n_caps, n_classes]
    tail: np.ndarray
    filled: np.ndarray  # [n_caps] slots taken so far (empty slots are used in order)
    hits: np.ndarray  # [n_layer, 2, n_caps]
    distinct: np.ndarray  # [n_layer, 2]
    probe: np.ndarray  # [n_caps]


def check_knobs(half_life_tokens: float, n_classes: int, increment: float, clock: str, ties: str) -> None:
    if not (np.isfinite(half_life_tokens) and half_life_tokens > 0):
        raise MoeModelError(f"half_life_tokens must be a positive number of tokens, got {half_life_tokens}")
    if n_classes != int(n_classes) or not 1 <= n_classes <= 64:
        raise MoeModelError(f"n_classes must be a whole number in 1..64, got {n_classes}")
    if not (np.isfinite(increment) and increment > 0):
        raise MoeModelError(f"increment must be a positive number, got {increment}")
    if clock not in CLOCKS or ties not in TIES:
        raise MoeModelError(f"clock must be one of {CLOCKS} and ties one of {TIES}, got {clock!r}, {ties!r}")


def new_state(caps: np.ndarray, n_layer: int, n_expert: int, **knobs) -> ClassLruState:
    k = KNOBS | knobs
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], k["clock"], k["ties"])
    caps = np.asarray(caps, dtype=np.int64)
    n_caps, n_keys, n_cls = len(caps), n_layer * n_expert, int(k["n_classes"])
    total = int(caps.sum())
    return ClassLruState(
        caps,
        np.concatenate(([0], np.cumsum(caps))).astype(np.int64),
        float(k["half_life_tokens"]),
        n_cls,
        float(k["increment"]),
        k["clock"] == "group",
        k["ties"] == "high-class",
        np.zeros(n_keys, dtype=np.float64),
        np.full(n_keys, -1, dtype=np.int64),
        np.zeros(n_layer, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.full((n_caps, n_keys), -1, dtype=np.int32),
        np.full(total, -1, dtype=np.int32),
        np.full(total, -1, dtype=np.int32),
        np.full(total, -1, dtype=np.int32),
        np.zeros(total, dtype=np.int8),
        np.zeros(total, dtype=np.int64),
        np.full(total, -1, dtype=np.int64),
        np.full((n_caps, n_cls), -1, dtype=np.int32),
        np.full((n_caps, n_cls), -1, dtype=np.int32),
        np.zeros(n_caps, dtype=np.int64),
        np.zeros((n_layer, 2, n_caps), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
        np.zeros(n_caps, dtype=np.int64),
    )


def state_bytes(n_layer: int, n_expert: int, caps: np.ndarray) -> int:
    """Bytes of one ClassLruState (what `new_state` allocates), before a chunk's entries."""
    n_keys, n_caps = n_layer * n_expert, len(caps)
    return 16 * n_keys + 4 * n_caps * n_keys + 37 * int(np.sum(caps)) + 8 * n_caps * (2 * N_CLASSES + 2 * n_layer + 2)


def ns_per_lookup(n_caps: int) -> float:
    """Kernel time per lookup of a pass: the shared CRF once, then each pool size's lists."""
    return SIM_NS_PER_LOOKUP_PASS / 4 + CLASS_LRU_NS_PER_LOOKUP_BUDGET * n_caps


def feed(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing the pass."""
    n_rec = len(rec_mode)
    n_ent = int(np.minimum(rec_ntok.astype(np.int64) * k, n_expert).sum())
    ent_start = np.zeros(n_rec + 1, dtype=np.int64)
    ent_key = np.empty(n_ent, dtype=np.int32)
    ent_cls = np.empty(n_ent, dtype=np.int8)
    ent_sorted = np.empty(n_ent, dtype=np.int64)
    rec_now = np.zeros(n_rec, dtype=np.int64)
    clock0 = s.clock.copy()
    _shared(
        rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, s.crf, s.last_use, s.clock,
        s.half_life, s.increment, s.n_classes, s.group_clock, ent_start, ent_key, ent_cls, ent_sorted, rec_now,
        s.distinct,
    )  # fmt: skip
    inv = 2.0 ** -np.arange(s.n_classes, dtype=np.float64)
    _budgets(
        rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_cls, ent_sorted, rec_now, clock0, s.tick[0],
        n_expert, s.group_clock, s.ties_high, inv, s.caps, s.offsets, s.slot_of, s.key_of, s.prev, s.nxt, s.cls_of,
        s.t_of, s.rec_of, s.head, s.tail, s.filled, s.hits, s.probe,
    )  # fmt: skip
    s.tick[0] += n_rec


def results(s: ClassLruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe hits [n_caps]) of everything fed so far."""
    return s.hits.copy(), s.distinct.copy(), s.probe.copy()


@njit(cache=True)
def _shared(
    rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, crf, last_use, clock, half_life, increment,
    n_classes, group_clock, ent_start, ent_key, ent_cls, ent_sorted, rec_now, distinct,
):  # fmt: skip
    """Per record: its distinct experts (first appearance), each key's CRF after this use and its class, the
    keys in expert-id order, and the clock; what every pool size of the pass shares."""
    seen = np.zeros(n_expert, dtype=np.int64)
    n = 0
    for r in range(len(rec_mode)):
        ent_start[r] = n
        mode = rec_mode[r]
        if mode == MODE_SKIP:
            continue
        layer = rec_layer[r]
        base = layer * n_expert
        nu = 0
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if seen[e] != r + 1:
                seen[e] = r + 1
                ent_key[n + nu] = base + e
                nu += 1
        if mode == MODE_CACHE:
            for j in range(nu):  # the record's entries in expert-id order: insertion sort, a handful each
                q, key = j, ent_key[n + j]
                while q > 0 and ent_key[ent_sorted[n + q - 1]] > key:
                    ent_sorted[n + q] = ent_sorted[n + q - 1]
                    q -= 1
                ent_sorted[n + q] = n + j
            c = 0 if group_clock else layer
            clock[c] += rec_ntok[r]
            now = clock[c]
            rec_now[r] = now
            distinct[layer, rec_large[r]] += nu
            for q in range(n, n + nu):
                key = ent_key[q]
                if last_use[key] >= 0:
                    value = crf[key] * 2.0 ** (-(now - last_use[key]) / half_life) + increment
                else:
                    value = increment
                crf[key] = value
                last_use[key] = now
                cls = int(np.floor(np.log2(value))) if value > 0 else 0
                ent_cls[q] = min(n_classes - 1, max(0, cls))
        n += nu
    ent_start[len(rec_mode)] = n


@njit(cache=True, inline="always")
def _unlink(s, c, prev, nxt, head, tail):
    if prev[s] >= 0:
        nxt[prev[s]] = nxt[s]
    else:
        head[c] = nxt[s]
    if nxt[s] >= 0:
        prev[nxt[s]] = prev[s]
    else:
        tail[c] = prev[s]


@njit(cache=True, inline="always")
def _append(s, c, prev, nxt, head, tail):
    prev[s] = tail[c]
    nxt[s] = -1
    if tail[c] >= 0:
        nxt[tail[c]] = s
    else:
        head[c] = s
    tail[c] = s


@njit(cache=True)
def _budgets(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_cls, ent_sorted, rec_now, clock0, tick0, n_expert,
    group_clock, ties_high, inv, caps, offsets, slot_of_all, key_of, prev, nxt, cls_of, t_of, rec_of, head_all,
    tail_all, filled, hits, probe,
):  # fmt: skip
    """Every pool size of the pass replays the chunk in turn (its lists stay in the CPU's cache meanwhile)."""
    for b in range(len(caps)):
        head, tail = head_all[b], tail_all[b]
        slot_of = slot_of_all[b]
        clock = clock0.copy()
        for r in range(len(rec_mode)):
            lo, hi = ent_start[r], ent_start[r + 1]
            mode = rec_mode[r]
            if mode == MODE_SKIP or lo == hi:
                continue
            if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
                for q in range(lo, hi):
                    if slot_of[ent_key[q]] >= 0:
                        probe[b] += 1
                continue
            layer, stamp, now = rec_layer[r], tick0 + r, rec_now[r]
            clock[0 if group_clock else layer] = now
            for q in range(lo, hi):  # hits first, refreshed in first-appearance order into their new class
                s = slot_of[ent_key[q]]
                if s >= 0:
                    hits[layer, rec_large[r], b] += 1
                    _unlink(s, cls_of[s], prev, nxt, head, tail)
                    _append(s, ent_cls[q], prev, nxt, head, tail)
                    cls_of[s], t_of[s], rec_of[s] = ent_cls[q], now, stamp
            for j in range(lo, hi):  # then the misses in expert-id order
                q = ent_sorted[j]
                key = ent_key[q]
                if slot_of[key] >= 0:
                    continue
                if filled[b] < caps[b]:
                    s = offsets[b] + filled[b]
                    filled[b] += 1
                else:
                    s = _victim(head, key_of, t_of, rec_of, stamp, clock, n_expert, group_clock, ties_high, inv)
                    _unlink(s, cls_of[s], prev, nxt, head, tail)
                    slot_of[key_of[s]] = -1
                key_of[s], slot_of[key] = key, s
                _append(s, ent_cls[q], prev, nxt, head, tail)
                cls_of[s], t_of[s], rec_of[s] = ent_cls[q], now, stamp


@njit(cache=True, inline="always")
def _victim(head, key_of, t_of, rec_of, stamp, clock, n_expert, group_clock, ties_high, inv):
    """The least recently used slot of a class list not touched by this plan() with the largest age / 2^class."""
    best, best_score = -1, -1.0
    for c in range(len(inv)):
        s = head[c]
        if s < 0 or rec_of[s] == stamp:  # a list whose head this plan used holds only slots it used
            continue
        age = clock[0 if group_clock else key_of[s] // n_expert] - t_of[s]
        score = age * inv[c]
        if score > best_score or (ties_high and score == best_score):
            best, best_score = s, score
    return best


def kernel(**knobs) -> Kernel:
    """The ClassLRU kernel with its knobs (KNOBS's defaults where not given)."""
    k = KNOBS | knobs
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], k["clock"], k["ties"])
    return Kernel(
        "class-lru-b12170",
        lambda caps, n_layer, n_expert: new_state(caps, n_layer, n_expert, **k),
        feed,
        results,
        state_bytes,
        ns_per_lookup,
    )


def run(
    model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None, **knobs
) -> list[PolicyResult]:
    """Every budget of a class in one pass per group (simulate_budgets with the ClassLRU kernel)."""
    return [from_simulation(r) for r in simulate_budgets(model, work, budgets_mib, placement, kernel(**knobs))]


POLICY = Policy(
    "class-lru-b12170",
    MODELLED,
    "llama.cpp b12170+ src/llama-moe-cache.cpp (PR #31233), its opening comment at commit c4fb5796; "
    "../shared/docs/llamacpp-moe-cache.md section 10",
    "one LRU list per frequency class (CRF: uses decayed with a 128-token half-life, kept across evictions); "
    "evict the least recent slot of the list with the largest age / 2^class",
    run,
    KNOBS,
    kernel=kernel,
)
