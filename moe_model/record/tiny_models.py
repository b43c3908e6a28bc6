"""Tiny random-weight MoE models that llama.cpp loads and runs, written with the project's own GGUF writer: one per
architecture the recorder is tested on (qwen3moe, gpt-oss, deepseek2). A few MB each, F32 weights, a byte-level
SPM vocabulary; the routers' weights spread wide so each token's top-k is not decided by ties.

The tensors and hyperparameters each architecture needs are those its llama.cpp loader asks for
(src/models/<arch>.cpp load_arch_hparams / load_arch_tensors of the llama.cpp that llama-cpp-python 0.3.36 vendors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFValueType

from moe_model.atomic import write_atomic
from moe_model.readers.gguf_writer import StringArray, TypedArray, gguf_bytes
from moe_model.record.runtime import RecordError


@dataclass(frozen=True)
class TinyShape:
    """The sizes of a tiny model (hidden size, heads, experts, the expert FFN's width)."""

    n_layer: int = 3
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_expert: int = 16
    n_expert_used: int = 4
    n_ff_exp: int = 32
    n_ctx: int = 4096


SPECIAL = ("<unk>", "<s>", "</s>")
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
WORDS = tuple(f"\u2581{c}" for c in "abcdefghijklmnopqrstuvwxyz") + ("\u2581the", "\u2581of", "\u2581and", "\u2581to")


def vocabulary() -> dict[str, object]:
    """An SPM vocabulary of the special tokens, the 256 byte tokens and a few words (~290 tokens)."""
    tokens = [*SPECIAL, *(f"<0x{b:02X}>" for b in range(256)), *WORDS]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256 + [TOKEN_NORMAL] * len(WORDS)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(WORDS))]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": StringArray(tokens),
        "tokenizer.ggml.scores": TypedArray(GGUFValueType.FLOAT32, scores),
        "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, types),
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": True,
    }


N_VOCAB = len(SPECIAL) + 256 + len(WORDS)


class _Weights:
    """Random tensors of one model, seeded: normal weights scaled by 1/sqrt(fan-in), norms of ones."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}

    def dense(self, name: str, *shape: int, scale: float = 1.0) -> None:
        self.tensors[name] = (self.rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def ones(self, name: str, *shape: int) -> None:
        self.tensors[name] = np.ones(shape, dtype=np.float32)

    def zeros(self, name: str, *shape: int) -> None:
        self.tensors[name] = np.zeros(shape, dtype=np.float32)

    def router(self, name: str, n_expert: int, n_embd: int) -> None:
        self.dense(name, n_expert, n_embd, scale=3.0)  # wide logits, softmax not saturated: top-k far from ties

    def outer(self, s: TinyShape) -> None:
        self.dense("token_embd.weight", N_VOCAB, s.n_embd, scale=np.sqrt(s.n_embd))
        self.ones("output_norm.weight", s.n_embd)
        self.dense("output.weight", N_VOCAB, s.n_embd)

    def attention(self, p: str, s: TinyShape) -> None:
        """Grouped-query attention's four projections (qwen3moe and gpt-oss lay them out alike)."""
        q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
        self.dense(p + "attn_q.weight", q, s.n_embd)
        self.dense(p + "attn_k.weight", kv, s.n_embd)
        self.dense(p + "attn_v.weight", kv, s.n_embd)
        self.dense(p + "attn_output.weight", s.n_embd, q)

    def experts(self, il: int, s: TinyShape) -> None:
        p = f"blk.{il}."
        self.router(p + "ffn_gate_inp.weight", s.n_expert, s.n_embd)
        self.dense(p + "ffn_gate_exps.weight", s.n_expert, s.n_ff_exp, s.n_embd)
        self.dense(p + "ffn_up_exps.weight", s.n_expert, s.n_ff_exp, s.n_embd)
        self.dense(p + "ffn_down_exps.weight", s.n_expert, s.n_embd, s.n_ff_exp)


def _common(arch: str, s: TinyShape) -> dict[str, object]:
    return {
        "general.architecture": arch,
        "general.name": f"tiny-{arch}",
        f"{arch}.context_length": s.n_ctx,
        f"{arch}.embedding_length": s.n_embd,
        f"{arch}.block_count": s.n_layer,
        f"{arch}.feed_forward_length": s.n_ff_exp * s.n_expert_used,
        f"{arch}.attention.head_count": s.n_head,
        f"{arch}.attention.head_count_kv": s.n_head_kv,
        f"{arch}.attention.key_length": s.head_dim,
        f"{arch}.attention.value_length": s.head_dim,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.expert_count": s.n_expert,
        f"{arch}.expert_used_count": s.n_expert_used,
        f"{arch}.expert_feed_forward_length": s.n_ff_exp,
        f"{arch}.rope.freq_base": 10000.0,
        **vocabulary(),
    }


def qwen3moe(s: TinyShape, seed: int) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """src/models/qwen3moe.cpp: q/k norms, no biases, softmax routing."""
    w = _Weights(seed)
    w.outer(s)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        w.ones(p + "attn_norm.weight", s.n_embd)
        w.attention(p, s)
        w.ones(p + "attn_q_norm.weight", s.head_dim)
        w.ones(p + "attn_k_norm.weight", s.head_dim)
        w.ones(p + "ffn_norm.weight", s.n_embd)
        w.experts(il, s)
    return _common("qwen3moe", s), w.tensors


def gpt_oss(s: TinyShape, seed: int) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """src/models/openai-moe.cpp: attention sinks, biases on the router and experts, sliding-window layers."""
    w = _Weights(seed)
    w.outer(s)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        w.ones(p + "attn_norm.weight", s.n_embd)
        w.ones(p + "post_attention_norm.weight", s.n_embd)
        w.attention(p, s)
        w.zeros(p + "attn_output.bias", s.n_embd)
        w.zeros(p + "attn_sinks.weight", s.n_head)
        w.experts(il, s)
        w.zeros(p + "ffn_gate_inp.bias", s.n_expert)
        w.zeros(p + "ffn_gate_exps.bias", s.n_expert, s.n_ff_exp)
        w.zeros(p + "ffn_up_exps.bias", s.n_expert, s.n_ff_exp)
        w.zeros(p + "ffn_down_exps.bias", s.n_expert, s.n_embd)
    meta = _common("gpt-oss", s) | {"gpt-oss.attention.sliding_window": 128}
    return meta, w.tensors


DEEPSEEK2_KV_LORA, DEEPSEEK2_ROPE = 32, 8  # the compressed KV's rank, the rotated part of each head


def deepseek2(s: TinyShape, seed: int) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """src/models/deepseek2.cpp without MLA weights (wkv_b unsplit) and no Q LoRA: one leading dense layer, then
    MoE layers with a shared expert."""
    w = _Weights(seed)
    w.outer(s)
    heads, rank = s.n_head * s.head_dim, DEEPSEEK2_KV_LORA
    nope = s.head_dim - DEEPSEEK2_ROPE
    for il in range(s.n_layer):
        p = f"blk.{il}."
        w.ones(p + "attn_norm.weight", s.n_embd)
        w.ones(p + "attn_kv_a_norm.weight", rank)
        w.dense(p + "attn_q.weight", heads, s.n_embd)
        w.dense(p + "attn_kv_a_mqa.weight", rank + DEEPSEEK2_ROPE, s.n_embd)
        w.dense(p + "attn_kv_b.weight", s.n_head * (nope + s.head_dim), rank)
        w.dense(p + "attn_output.weight", s.n_embd, heads)
        w.ones(p + "ffn_norm.weight", s.n_embd)
        if il == 0:
            for name, shape in (("gate", (s.n_ff_exp, s.n_embd)), ("up", (s.n_ff_exp, s.n_embd))):
                w.dense(p + f"ffn_{name}.weight", *shape)
            w.dense(p + "ffn_down.weight", s.n_embd, s.n_ff_exp)
            continue
        w.experts(il, s)
        w.dense(p + "ffn_gate_shexp.weight", s.n_ff_exp, s.n_embd)
        w.dense(p + "ffn_up_shexp.weight", s.n_ff_exp, s.n_embd)
        w.dense(p + "ffn_down_shexp.weight", s.n_embd, s.n_ff_exp)
    arch = "deepseek2"
    meta = _common(arch, s) | {
        f"{arch}.feed_forward_length": s.n_ff_exp,
        f"{arch}.attention.head_count_kv": s.n_head,
        f"{arch}.leading_dense_block_count": 1,
        f"{arch}.attention.q_lora_rank": 0,
        f"{arch}.attention.kv_lora_rank": rank,
        f"{arch}.rope.dimension_count": DEEPSEEK2_ROPE,
        f"{arch}.expert_shared_count": 1,
        f"{arch}.expert_weights_scale": 1.0,
        f"{arch}.expert_gating_func": 1,
    }
    return meta, w.tensors


ARCHITECTURES: dict[str, Callable[[TinyShape, int], tuple[dict[str, object], dict[str, np.ndarray]]]] = {
    "qwen3moe": qwen3moe,
    "gpt-oss": gpt_oss,
    "deepseek2": deepseek2,
}


def tiny_model_bytes(arch: str, shape: TinyShape = TinyShape(), seed: int = 0) -> bytes:
    """A whole GGUF of a tiny random-weight model of `arch`."""
    if arch not in ARCHITECTURES:
        raise RecordError(f"no tiny model of {arch!r}; architectures: {', '.join(ARCHITECTURES)}")
    metadata, tensors = ARCHITECTURES[arch](shape, seed)
    return gguf_bytes(metadata, tensors)


def write_tiny_model(path: str | Path, arch: str, shape: TinyShape = TinyShape(), seed: int = 0) -> Path:
    data = tiny_model_bytes(arch, shape, seed)
    write_atomic(path, lambda f: f.write(data))
    return Path(path)
