"""llama-server's start-up warm-up, in one place: how many tokens it decodes and what each layer's MoE sees.

b11549 (commit 4b060f27) `common/common.cpp` common_init_from_params decodes one ubatch of {BOS, EOS} before
serving (skipped with --no-warmup); nothing calls `llama_set_warmup`, so `src/llama-moe-cache.cpp` looks the
ubatch up like any decode, counts it as "ubatch <= 8" and fills the cold pool with its experts. Its last layer
computes only the output token, so that layer's MoE sees 1 token (docs/llamacpp-cache.md, the warm-up).
The ubatch builder, the calibration's logged rates and the time model's cold start use these.
"""

from __future__ import annotations

WARM_UP_TOKENS = 2  # BOS and EOS
WARM_UP_LAST_LAYER_TOKENS = 1  # the last layer keeps only the output row


def warm_up_tokens(layer: int, n_layer: int) -> int:
    """Tokens the warm-up's MoE sees at `layer` of `n_layer`: both, but the last layer's only the output."""
    return WARM_UP_LAST_LAYER_TOKENS if layer == n_layer - 1 else WARM_UP_TOKENS
