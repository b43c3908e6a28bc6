"""llama-server's start-up warm-up, in one place: how many tokens it decodes and what each layer's MoE sees.

b11549 (commit 4b060f27) `common/common.cpp` common_init_from_params decodes one ubatch of {BOS, EOS} before
serving (skipped with --no-warmup), whatever the architecture (b11063 and b11434 do the same; a vocabulary without
one of them decodes the other alone); nothing calls `llama_set_warmup`, so `src/llama-moe-cache.cpp` looks the
ubatch up like any decode, counts it as "ubatch <= 8" and fills the cold pool with its experts. Only EOS is an
output (common_batch_get_one), so where the last layer prunes to the output rows (llama/output_rows.py: every
architecture from b11480 on) its MoE sees 1 token, elsewhere both (docs/llamacpp-cache.md, the warm-up).
The ubatch builder, the calibration's logged rates and the time model's cold start use these.
"""

from __future__ import annotations

WARM_UP_TOKENS = 2  # BOS and EOS
WARM_UP_OUTPUTS = 1  # the last token (EOS) is the only output row


def warm_up_tokens(layer: int, n_layer: int, last_layer_prunes: bool = True) -> int:
    """Tokens the warm-up's MoE sees at `layer` of `n_layer`: both, but only the output where the last layer
    prunes (output_rows.last_layer_prunes of the model's architecture and build)."""
    return WARM_UP_OUTPUTS if last_layer_prunes and layer == n_layer - 1 else WARM_UP_TOKENS
