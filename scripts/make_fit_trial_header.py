"""Write a header llama.cpp can load with the Qwen3-30B-A3B Q4_K_M tensor table of sample_data/models/.

For `llama-fit-params` trials (sample_data/groundtruth/fit-trials/README.md): the sample header has no
merges and placeholder token strings, which llama.cpp's loader refuses; this one has a 151,936-token
SentencePiece-style vocabulary of placeholders and every key qwen3moe needs. `--fit` never reads the
weights, so `truncate -s <printed size>` turns it into a model file for those trials.

    python scripts/make_fit_trial_header.py OUT.gguf
"""

from __future__ import annotations

import math
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

from moe_model.fits.points import MODELS
from moe_model.readers.gguf import read_header

N_VOCAB = 151936


def _nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    return math.prod(shape) // block * size


def main(out: str) -> None:
    table = read_header(MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf").tensors
    w = GGUFWriter(out, "qwen3moe")
    w.add_name("Qwen3-30B-A3B-layout")
    w.add_block_count(48)
    w.add_context_length(40960)
    w.add_embedding_length(2048)
    w.add_feed_forward_length(6144)
    w.add_head_count(32)
    w.add_head_count_kv(4)
    w.add_key_length(128)
    w.add_value_length(128)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(128)
    w.add_expert_used_count(8)
    w.add_expert_feed_forward_length(768)
    w.add_file_type(15)
    w.add_quantization_version(2)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"tok{i}" for i in range(N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([1] * N_VOCAB)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for t in table:
        qtype = GGMLQuantizationType(t.ggml_type)
        w.add_tensor_info(t.name, list(reversed(t.shape)), np.dtype(np.float32), _nbytes(t.shape, t.ggml_type), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    written = read_header(out)
    end = max(t.offset + _nbytes(t.shape, t.ggml_type) for t in written.tensors)
    print(f"wrote {out}; truncate -s {written.data_offset + end} to make it a model file")


if __name__ == "__main__":
    main(sys.argv[1])
