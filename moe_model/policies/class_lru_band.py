"""ClassLRU's open readings as a band: the default reading at every pool size and the readings that bound the
others (class_lru.BAND_READINGS) at a sample of them, in one stream of records; the band's offsets from the default
are interpolated between the sampled sizes. The policy the registry lists is ClassLRU's with this band."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from moe_model.limits import CLASS_LRU_BAND_ALL, CLASS_LRU_BAND_STRIDE
from moe_model.llama.simulate import Kernel
from moe_model.numba_cache import parallel_kernels_may_overlap
from moe_model.policies.class_lru import (
    BAND_READINGS,
    NAME,
    ClassLruState,
    entries,
    new_state,
    ns_per_lookup,
    reading_name,
    replay,
    results,
    state_bytes,
)
from moe_model.policies.class_lru import POLICY as DEFAULT_READING


@dataclass(frozen=True, eq=False)
class BandState:
    """A pass of the default reading at every pool size and of each band reading at a sample of them."""

    default: ClassLruState
    sampled: np.ndarray  # indices of the pass's pool sizes the band readings replay
    others: tuple[ClassLruState, ...]


def band_sample(n_caps: int) -> np.ndarray:
    """The pool sizes (indices, ascending) a band reading replays: all of a few, else every CLASS_LRU_BAND_STRIDE-th
    and the largest (between them the band's offsets from the default are interpolated: band_hits)."""
    if n_caps <= CLASS_LRU_BAND_ALL:
        return np.arange(n_caps)
    return np.unique(np.append(np.arange(0, n_caps, CLASS_LRU_BAND_STRIDE), n_caps - 1))


def _band_state(caps: np.ndarray, n_layer: int, n_expert: int, readings: tuple, group_keys: int | None) -> BandState:
    sampled = band_sample(len(caps))
    others = tuple(
        new_state(np.asarray(caps)[sampled], n_layer, n_expert, group_keys=group_keys, **r) for r in readings
    )
    return BandState(new_state(caps, n_layer, n_expert, group_keys=group_keys), sampled, others)


def _band_feed(s: BandState, *chunk, threads: bool = True) -> None:
    """Every reading replays the same chunk (one stream of records for the default and the band): its records'
    distinct experts found once; each reading's pool sizes on numba's threads, or (not `threads`) on this one."""
    shared = entries(*chunk)
    for state in (s.default, *s.others):
        replay(state, shared, threads)


def _band_feed_in_turn(s: BandState, *chunk) -> None:
    _band_feed(s, *chunk, threads=False)


def band_hits(s: BandState) -> tuple[np.ndarray, np.ndarray]:
    """Each band reading's hits at every pool size of the pass [n_readings, n_caps]: replayed where sampled, else
    the default's plus the band reading's offset from it, interpolated linearly in pool size; and which pool
    sizes were replayed."""
    caps, default = s.default.caps, results(s.default)[0].sum(axis=(0, 1))
    out = np.empty((len(s.others), len(caps)), dtype=np.float64)
    for i, other in enumerate(s.others):
        replayed = results(other)[0].sum(axis=(0, 1))
        out[i] = default + np.interp(caps, caps[s.sampled], replayed - default[s.sampled])
        out[i, s.sampled] = replayed
    return out, np.isin(np.arange(len(caps)), s.sampled)


@functools.cache  # one Kernel: callers group simulations by kernel
def band_kernel() -> Kernel:
    """The default reading's kernel with the band readings replayed beside it (Kernel.band)."""
    readings, n = BAND_READINGS, len(BAND_READINGS)
    return Kernel(
        NAME,
        lambda caps, n_layer, n_expert, group_keys=None: _band_state(caps, n_layer, n_expert, readings, group_keys),
        _band_feed,
        lambda s: results(s.default),
        lambda n_layer, n_expert, caps: state_bytes(n_layer, n_expert, caps) * (1 + n),
        lambda n_caps: ns_per_lookup(n_caps) + n * ns_per_lookup(len(band_sample(n_caps))),
        lanes=False,
        lane_feed=_band_feed_in_turn if parallel_kernels_may_overlap() else None,
        band=band_hits,
        band_readings=tuple(reading_name(r) for r in readings),
    )


POLICY = replace(DEFAULT_READING, band_kernel=band_kernel)
