"""llama-server's start-up decodes, in one place: the warm-up and the seq_rm probe, their tokens, what each layer's
MoE sees, and which builds make the probe.

b11549 (commit 4b060f27) `common/common.cpp` common_init_from_params decodes one ubatch of {BOS, EOS} before
serving (skipped with --no-warmup), whatever the architecture (b11063 and b11434 do the same; a vocabulary without
one of them decodes the other alone); nothing calls `llama_set_warmup`, so `src/llama-moe-cache.cpp` looks the
ubatch up like any decode, counts it as "ubatch <= 8" and fills the cold pool with its experts. Only EOS is an
output (common_batch_get_one), so where the last layer prunes to the output rows (llama/output_rows.py: every
architecture from b11480 on) its MoE sees 1 token, elsewhere both (docs/llamacpp-cache.md, the warm-up).
The ubatch builder, the calibration's logged rates and the time model's cold start use these.

Then b11549 `tools/server/server-context.cpp` load_model calls `common_context_can_seq_rm(ctx_tgt)`
(`common/common.cpp`): the memory cleared, {0, 0} decoded at positions 0 and 1 with the second the output, the
memory cleared again (also with --no-warmup: it is not part of the warm-up). It returns early, decoding nothing,
only where `llama_n_rs_seq(ctx) > 0` (MTP, EAGLE3, DFlash or DSpark drafting on an architecture with recurrent
rollback), which this project does not model. The same call is in b11063, b11434 and commit 0c1e5709 (the copy
llama-cpp-python 0.3.36 vendors); trees before b11063 were not read (docs/llamacpp-cache.md section 7).
The probe's two tokens are one token id whose values (V) are equal at both positions, so every layer's hidden
states are equal up to rounding and they route as one row: run11b's recording of b11549's start-up
(sample_data/groundtruth/run11/run11b) selects the same 8 experts for both at 19 of 24 layers, 9 at the rest.
Attention sinks (gpt-oss) weigh the two positions' values differently, so there they may split a little more
(tests/record: a tiny gpt-oss routes them one expert apart at one layer of two); one row stays the model.
`start_up_rows` is what the time model, the traffic and the calibration count of the start-up.
"""

from __future__ import annotations

WARM_UP_TOKENS = 2  # BOS and EOS
WARM_UP_OUTPUTS = 1  # the last token (EOS) is the only output row
PROBE_TOKEN = 0  # common_context_can_seq_rm decodes this token ...
PROBE_TOKENS = 2  # ... twice, at positions 0 and 1
PROBE_OUTPUTS = 1  # the second is the only output row
PROBE_FROM_BUILD = 11063  # the earliest tree read that makes the probe at start-up


def warm_up_tokens(layer: int, n_layer: int, last_layer_prunes: bool = True) -> int:
    """Tokens the warm-up's MoE sees at `layer` of `n_layer`: both, but only the output where the last layer
    prunes (output_rows.last_layer_prunes of the model's architecture and build)."""
    return WARM_UP_OUTPUTS if last_layer_prunes and layer == n_layer - 1 else WARM_UP_TOKENS


def start_up_rows(layer: int, n_layer: int, build: int, last_layer_prunes: bool = True) -> int:
    """Token rows of distinct routing the start-up puts through `layer`'s MoE before any request: the warm-up's
    (warm_up_tokens) and, where `build` makes the seq_rm probe (start_up_probe), its two tokens as one row."""
    return warm_up_tokens(layer, n_layer, last_layer_prunes) + start_up_probe(build)


def start_up_probe(build: int) -> bool:
    """True where llama-server `build` decodes the seq_rm probe {0, 0} after its warm-up (b11549
    server-context.cpp load_model, `common_context_can_seq_rm`; every build from PROBE_FROM_BUILD read has it)."""
    return build >= PROBE_FROM_BUILD
