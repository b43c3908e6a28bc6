"""When one (layer, ubatch) record uses the slot pool: llama.cpp's get_slot_map guard, in one place.

b11549 `src/llama-moe-cache.cpp` get_slot_map(il, n_tokens, k) returns null (the layer bypasses the
pool for this ubatch) when n_tokens == 0, n_tokens > max_batch, or min(n_tokens * k, n_expert) > n_slots
(docs/llamacpp-cache.md section 5). Every policy, the stepper and the time model use this rule.

A ubatch that bypasses the pool is offloaded to the first GPU when it has at least GGML_OP_OFFLOAD_MIN_BATCH
tokens (ggml-backend sched; b11549 sched_copy_experts then copies its cached experts from the pool device to
device, reading the pool without touching the LRU), and computed on the CPU otherwise (same doc, section 4,
"Bypass for larger batches"): `copies_from_pool`, used by the simulator, the stepper, VRAM and the time model.
"""

from __future__ import annotations

import numpy as np

MAX_BATCH = 32  # llama_moe_cache::impl::max_batch: larger ubatches bypass the pool
OFFLOAD_MIN_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH: smaller bypassed batches stay on the CPU
NO_POOL = np.iinfo(np.int64).max  # the slots a record needs when it can never use the pool


def pool_need(n_tokens, k: int, n_expert: int):
    """Slots a group needs for a record to use its pool: min(n_tokens * k, n_expert), NO_POOL when it never
    can (no tokens, or more than MAX_BATCH). Works on an int or an array of token counts."""
    ntok = np.asarray(n_tokens, dtype=np.int64)
    need = np.where((ntok > 0) & (ntok <= MAX_BATCH), np.minimum(ntok * k, n_expert), NO_POOL)
    return need if need.ndim else int(need)


def too_large_for_pool(n_tokens: int) -> bool:
    """Whether a ubatch of n_tokens is past max_batch, so it bypasses every pool whatever its size."""
    return n_tokens > MAX_BATCH


def uses_pool(n_tokens, k: int, n_expert: int, n_slots: int):
    """True where a record of n_tokens tokens uses a pool of n_slots slots (b11549 get_slot_map).
    Works on an int or an array of token counts."""
    use = np.asarray(pool_need(n_tokens, k, n_expert)) <= n_slots
    return use if use.ndim else bool(use)


def copies_from_pool(n_tokens, offload_min_batch: int = OFFLOAD_MIN_BATCH):
    """True where a ubatch of n_tokens that bypasses the pool is offloaded to the GPU, which copies the experts it
    uses (cached ones from the pool); False where it stays on the CPU. Works on an int or an array."""
    offloaded = np.asarray(n_tokens) >= offload_min_batch
    return offloaded if offloaded.ndim else bool(offloaded)


def pool_classes(thresholds: np.ndarray, n_slots: np.ndarray) -> list[np.ndarray]:
    """Indices of the pool sizes (n_slots > 0) that admit the same records, one array per class: the rule above
    depends on the slots only through which of the records' needs (`thresholds`, ascending) they reach."""
    cls = np.searchsorted(thresholds, n_slots, side="right")
    return [np.flatnonzero((cls == c) & (n_slots > 0)) for c in np.unique(cls[n_slots > 0])]
