#!/usr/bin/env python3
"""run11 models for the CPU expert path by quantization: one qwen3moe shape (Qwen3-30B-A3B's expert size: n_embd 2048,
expert FFN 768, 128 experts, 8 used; 8 layers), every expert tensor in one ggml type, the rest the same in every file.
The header is the project's own writer (moe_model.readers.gguf_writer.header_bytes); the data is random block bytes
with each block's scale fields set to a small finite value (no NaN/Inf: tools/check_blocks11.py dequantizes them).
The dense part is kept small (2 query heads, 1 KV head, a 1,024-token vocabulary) so the expert bytes dominate.

usage: gen_quant11.py OUT.gguf TYPE [N_LAYER] [N_USED]      prints one JSON line (bytes per token, sizes)"""

import json
import sys
import time

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from moe_model.readers.gguf_writer import StringArray, TypedArray, header_bytes, tensor_nbytes

T = GGMLQuantizationType
N_EMBD, N_FF_EXP, N_EXPERT, N_HEAD, N_HEAD_KV, HEAD_DIM, N_VOCAB = 2048, 768, 128, 2, 1, 128, 1024
DENSE = T.Q8_0
D16, DMIN16, E8M0 = np.float16(1e-4), np.float16(7.5e-4), 117  # fp16 block scales; MXFP4's exponent (2^-11)
# byte offset of each fp16 scale field in a block (ggml-common.h block_* structs), and its value
SCALE_FIELDS = {
    T.Q4_0: [(0, D16)],
    T.Q8_0: [(0, D16)],
    T.IQ4_NL: [(0, D16)],
    T.IQ4_XS: [(0, D16)],
    T.IQ2_XXS: [(0, D16)],
    T.IQ2_XS: [(0, D16)],
    T.IQ3_XXS: [(0, D16)],
    T.IQ3_S: [(0, D16)],
    T.Q4_K: [(0, D16), (2, DMIN16)],
    T.Q5_K: [(0, D16), (2, DMIN16)],
    T.Q2_K: [(80, D16), (82, DMIN16)],
    T.Q3_K: [(108, D16)],
    T.Q6_K: [(208, D16)],
    T.MXFP4: [],  # byte 0 is the E8M0 exponent, set below
}


def random_blocks(qtype: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """n_blocks random blocks of qtype, scale fields set (uint8, shape (n_blocks, block bytes))."""
    b = rng.integers(0, 256, size=(n_blocks, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    for off, value in SCALE_FIELDS[qtype]:
        b[:, off : off + 2] = np.frombuffer(value.tobytes(), np.uint8)
    if qtype == T.MXFP4:
        b[:, 0] = E8M0
    return b


def vocab() -> dict:
    """A small SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then plain pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(N_VOCAB - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (N_VOCAB - 259)
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": StringArray(tokens),
        "tokenizer.ggml.scores": TypedArray(GGUFValueType.FLOAT32, [0.0] * N_VOCAB),
        "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, types),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }


def metadata(n_layer: int, n_used: int, qtype: T) -> dict:
    p = "qwen3moe"
    return {
        "general.architecture": p,
        "general.name": f"run11-qwen3moe-{qtype.name}",
        f"{p}.block_count": n_layer,
        f"{p}.context_length": 40960,
        f"{p}.embedding_length": N_EMBD,
        f"{p}.feed_forward_length": 6144,
        f"{p}.attention.head_count": N_HEAD,
        f"{p}.attention.head_count_kv": N_HEAD_KV,
        f"{p}.attention.key_length": HEAD_DIM,
        f"{p}.attention.value_length": HEAD_DIM,
        f"{p}.rope.freq_base": 1000000.0,
        f"{p}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{p}.expert_count": N_EXPERT,
        f"{p}.expert_used_count": n_used,
        f"{p}.expert_feed_forward_length": N_FF_EXP,
        f"{p}.vocab_size": N_VOCAB,
        **vocab(),
        "general.quantization_version": 2,
        "general.file_type": 7,  # MOSTLY_Q8_0: the dense part; the experts' type is in the tensor infos
    }


def tensors(n_layer: int, qtype: T) -> list[tuple[str, T, list[int]]]:
    out = [("token_embd.weight", DENSE, [N_EMBD, N_VOCAB])]
    for il in range(n_layer):
        b = f"blk.{il}."
        out += [
            (b + "attn_norm.weight", T.F32, [N_EMBD]),
            (b + "attn_q.weight", DENSE, [N_EMBD, N_HEAD * HEAD_DIM]),
            (b + "attn_k.weight", DENSE, [N_EMBD, N_HEAD_KV * HEAD_DIM]),
            (b + "attn_v.weight", DENSE, [N_EMBD, N_HEAD_KV * HEAD_DIM]),
            (b + "attn_output.weight", DENSE, [N_HEAD * HEAD_DIM, N_EMBD]),
            (b + "attn_q_norm.weight", T.F32, [HEAD_DIM]),
            (b + "attn_k_norm.weight", T.F32, [HEAD_DIM]),
            (b + "ffn_norm.weight", T.F32, [N_EMBD]),
            (b + "ffn_gate_inp.weight", T.F32, [N_EMBD, N_EXPERT]),
            (b + "ffn_gate_exps.weight", qtype, [N_EMBD, N_FF_EXP, N_EXPERT]),
            (b + "ffn_up_exps.weight", qtype, [N_EMBD, N_FF_EXP, N_EXPERT]),
            (b + "ffn_down_exps.weight", qtype, [N_FF_EXP, N_EMBD, N_EXPERT]),
        ]
    return out + [("output_norm.weight", T.F32, [N_EMBD]), ("output.weight", DENSE, [N_EMBD, N_VOCAB])]


def dense_data(name: str, qtype: T, shape: list[int], rng: np.random.Generator) -> bytes:
    n = int(np.prod(shape))
    if qtype == T.F32:
        arr = rng.normal(0, 0.02, n) if "gate_inp" in name else np.ones(n)
        return arr.astype(np.float32).tobytes()
    return random_blocks(qtype, tensor_nbytes(qtype, shape) // GGML_QUANT_SIZES[qtype][1], rng).tobytes()


def per_token_bytes(n_layer: int, n_used: int, qtype: T) -> dict:
    """Weight bytes one decoded token reads: n_used experts' gate, up and down per layer; the dense matrices."""
    expert = 3 * tensor_nbytes(qtype, [N_EMBD, N_FF_EXP])
    dense = sum(tensor_nbytes(t, s) for n, t, s in tensors(n_layer, qtype) if "exps" not in n and "token_embd" not in n)
    return dict(expert_bytes_per_token=n_layer * n_used * expert, dense_bytes_per_token=dense, expert_bytes=expert)


def main() -> None:
    out, tname = sys.argv[1], sys.argv[2]
    n_layer = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    n_used = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    qtype, rng, t0 = T[tname], np.random.default_rng(11), time.time()
    tl = tensors(n_layer, qtype)
    hdr = header_bytes(metadata(n_layer, n_used, qtype), tl)
    data_start = -(-len(hdr) // 32) * 32
    exp_bytes = tensor_nbytes(qtype, [N_EMBD, N_FF_EXP, N_EXPERT])
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    shift_blocks = 4099
    # one random buffer, read at a shifting whole-block offset for each expert tensor: fast to write
    pool = random_blocks(qtype, exp_bytes // block_bytes + 64 * shift_blocks, rng).reshape(-1)
    with open(out, "wb") as f:
        f.write(hdr + b"\0" * (data_start - len(hdr)))
        for k, (name, t, shape) in enumerate(tl):
            if "exps" in name:
                off = (k * shift_blocks % (64 * shift_blocks)) * block_bytes
                f.write(memoryview(pool)[off : off + exp_bytes])
            else:
                f.write(dense_data(name, t, shape, rng))
            f.write(b"\0" * ((-f.tell() + data_start) % 32))
        size = f.tell()
    info = dict(type=tname, n_layer=n_layer, n_used=n_used, file_bytes=size, write_s=round(time.time() - t0, 2))
    info.update(per_token_bytes(n_layer, n_used, qtype))
    info["bits_per_weight"] = 8 * block_bytes / GGML_QUANT_SIZES[qtype][0]
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
