"""Small hand-made models and workloads the simulator and the policies' tests share (random runs for hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from moe_model.routing.toy import toy_model
from moe_model.workload import PHASE_DECODE, Workload


def tiny_model(n_layer=4, n_expert=16, k=2, mixed=True):
    """Two groups when mixed (odd layers get another ffn_down type), 3 MiB slots."""
    return toy_model(mixed, n_layer, n_expert, k)


def make_workload(records, n_layer, n_expert, k):
    """records: list of (ubatch, layer, ntok, ids)."""
    ub, layer, ntok, ids = zip(*records, strict=True)
    lens = np.array([len(x) for x in ids])
    off = np.concatenate([[0], np.cumsum(lens)[:-1]])
    flat = np.concatenate([np.asarray(x, dtype=np.int32) for x in ids]) if lens.sum() else np.zeros(0, np.int32)
    return Workload(
        n_layer,
        n_expert,
        k,
        np.array(ub),
        np.array(layer, dtype=np.int32),
        np.array(ntok, dtype=np.int32),
        off.astype(np.int64),
        np.full(len(ub), PHASE_DECODE, np.int8),
        flat,
        0,
    )


@st.composite
def random_runs(draw):
    n_layer, n_expert, k = draw(st.integers(2, 4)), draw(st.sampled_from([8, 16])), draw(st.integers(1, 3))
    n_ub = draw(st.integers(1, 40))
    hot = draw(st.integers(2, n_expert))  # small hot sets make reuse (and ties inside records) common
    records = []
    for u in range(n_ub):
        ntok = draw(st.sampled_from([1, 1, 1, 2, 3, 5, 9, 32, 33, 40]))
        for il in range(n_layer):
            picks = [
                draw(st.lists(st.integers(0, hot - 1), min_size=k, max_size=k, unique=True))
                if k <= hot
                else list(range(k))
                for _ in range(ntok)
            ]
            records.append((u, il, ntok, [e for p in picks for e in p]))
    return n_layer, n_expert, k, records
