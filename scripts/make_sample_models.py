"""Write the header-only sample GGUF files in sample_data/models/.

Each model is laid out from its published architecture (config.json on Hugging Face) and typed
the way llama.cpp's quantizer types it (src/llama-quant.cpp, paraphrased in
docs/llamacpp-cache.md section 11). The vocabulary has the real token count with
placeholder token strings; merges are left out to keep the files small.

    python scripts/make_sample_models.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGUFValueType, LlamaFileType
from gguf import GGMLQuantizationType as T

from moe_model.readers.gguf_writer import Scalar, StringArray, TypedArray, header_bytes

OUT = Path(__file__).resolve().parent.parent / "sample_data" / "models"


@dataclass(frozen=True)
class Arch:
    """A MoE transformer's shape, as its config.json states it."""

    file_stem: str
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_vocab: int
    n_ctx: int
    ftype: LlamaFileType
    biases: bool = False  # gpt-oss: attention, router and expert biases, attention sinks
    qk_norm: bool = False  # qwen3: per-head q/k norms
    n_shards: int = 1
    # Where the quant's per-tensor types are not published: (ffn_gate/up_exps, ffn_down_exps,
    # ffn_down_exps of use_more_bits layers), chosen to match a logged host-expert MiB.
    expert_types: tuple[T, T, T] | None = None
    vocab_strings: bool = True  # False: only {arch}.vocab_size, no placeholder token strings (a small file)
    full_attention_interval: int = 1  # hybrid models: every Nth layer has attention K/V, the others linear attention
    n_ff_shexp: int = 0  # shared expert FFN (dense, always on the GPU with the layer)


MODELS = (
    # Qwen/Qwen3-30B-A3B config.json
    Arch(
        "Qwen3-30B-A3B-Q4_K_M",
        "Qwen3-30B-A3B",
        "qwen3moe",
        48,
        2048,
        32,
        4,
        128,
        128,
        8,
        768,
        151936,
        40960,
        LlamaFileType.MOSTLY_Q4_K_M,
        qk_norm=True,
    ),
    # openai/gpt-oss-20b config.json
    Arch(
        "gpt-oss-20b-MXFP4",
        "gpt-oss-20b",
        "gpt-oss",
        24,
        2880,
        64,
        8,
        64,
        32,
        4,
        2880,
        201088,
        131072,
        LlamaFileType.MOSTLY_MXFP4_MOE,
        biases=True,
    ),
    # Qwen/Qwen3-235B-A22B config.json; written as 3 shards like the published Q4_K_M files
    Arch(
        "Qwen3-235B-A22B-Q4_K_M",
        "Qwen3-235B-A22B",
        "qwen3moe",
        94,
        4096,
        64,
        4,
        128,
        128,
        8,
        1536,
        151936,
        40960,
        LlamaFileType.MOSTLY_Q4_K_M,
        qk_norm=True,
        n_shards=3,
    ),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json, laid out as qwen3moe (its gated-delta-net attention and
    # shared expert are left out: only the routed experts matter to the cache). A stand-in for the
    # "Qwen3.8-Flash-Next IQ4_NL" of the CPU-share article, whose header is not available.
    Arch(
        "Qwen3-Next-80B-A3B-IQ4_NL",
        "Qwen3-Next-80B-A3B (stand-in layout)",
        "qwen3moe",
        48,
        2048,
        16,
        2,
        256,
        512,
        10,
        512,
        151936,
        262144,
        LlamaFileType.MOSTLY_IQ4_NL,
        qk_norm=True,
    ),
    # mistralai/Mixtral-8x7B-v0.1 config.json (llama architecture with 8 experts)
    Arch(
        "Mixtral-8x7B-Q4_K_M",
        "Mixtral-8x7B-v0.1",
        "llama",
        32,
        4096,
        32,
        8,
        128,
        8,
        2,
        14336,
        32000,
        32768,
        LlamaFileType.MOSTLY_Q4_K_M,
    ),
    # Qwen3.8-Flash-Next (unsloth UD-Q4_K_XL) of the V620 field rows (field-measurements.csv): 48 layers x 512
    # experts, 10 used, as the sources state. The quant's per-tensor types and the model's n_embd/n_ff_exp are not
    # published: this header is made from the architecture to match the logged host-expert MiB (51,950 for
    # --n-cpu-moe 34, 60,950 for 40, 73,450 for 48): 3072 x 512 experts, gate/up Q5_K, down Q4_K (Q6_K-style
    # use_more_bits layers: Q5_K) gives 52,032 / 61,152 / 73,728 MiB (+0.2/+0.3/+0.4 %). Laid out as qwen3moe
    # with hybrid attention (K/V in every 4th layer, as Qwen3-Next) and a shared expert of FFN 16,384 sized so the
    # dense weights on the GPU (5,274 MiB) match the logged VRAM of the no-cache --n-cpu-moe 48 row (7,114 MiB, minus
    # KV, compute buffer and reserve as vram.py counts them); the PLE table of the ~103.7 GiB file is not modelled.
    Arch(
        "Qwen3.8-Flash-Next-UD-Q4_K_XL",
        "Qwen3.8-Flash-Next UD-Q4_K_XL (layout matched to logged host-expert MiB)",
        "qwen3moe",
        48,
        3072,
        16,
        2,
        256,
        512,
        10,
        512,
        151936,
        262144,
        LlamaFileType.MOSTLY_Q4_K_M,
        qk_norm=True,
        expert_types=(T.Q5_K, T.Q4_K, T.Q5_K),
        vocab_strings=False,
        full_attention_interval=4,
        n_ff_shexp=16384,
    ),
    # Qwen3.8-Flash-Next of the R9700 field rows, quant not stated: same made-up 3072 x 512 layout, typed to match
    # the logged 48,000 MiB of host experts at --n-cpu-moe 41 (gate/up Q3_K, down Q4_K, use_more_bits layers Q6_K:
    # 48,138 MiB, +0.3 %). A guess at a Q3_K_M-like mix, not the file the author used. Hybrid attention as above; a
    # shared expert of FFN 22,016 matches the dense VRAM of the no-cache --n-cpu-moe 41 row (15,978 MiB logged).
    Arch(
        "Qwen3.8-Flash-Next-R9700",
        "Qwen3.8-Flash-Next (R9700 quant, not stated; layout matched to logged host-expert MiB)",
        "qwen3moe",
        48,
        3072,
        16,
        2,
        256,
        512,
        10,
        512,
        151936,
        262144,
        LlamaFileType.MOSTLY_Q3_K_M,
        qk_norm=True,
        expert_types=(T.Q3_K, T.Q4_K, T.Q6_K),
        vocab_strings=False,
        full_attention_interval=4,
        n_ff_shexp=22016,
    ),
    # Qwen3.8-Flash-Next IQ3_XXS (ISTA-DASLab GSQ-RCO) of the RTX 4070 rows: same made-up 3072 x 512 layout, every
    # expert tensor IQ3_XXS (the quant's real mix is not published); hybrid attention and a shared expert of FFN 3,584
    # bring the tensors to the ~47 GB of weights stated.
    Arch(
        "Qwen3.8-Flash-Next-IQ3_XXS",
        "Qwen3.8-Flash-Next IQ3_XXS (experts IQ3_XXS; layout assumed)",
        "qwen3moe",
        48,
        3072,
        16,
        2,
        256,
        512,
        10,
        512,
        151936,
        262144,
        LlamaFileType.MOSTLY_IQ3_XXS,
        qk_norm=True,
        expert_types=(T.IQ3_XXS, T.IQ3_XXS, T.IQ3_XXS),
        vocab_strings=False,
        full_attention_interval=4,
        n_ff_shexp=3584,
    ),
    # Qwen3.6-35B-A3B (unsloth UD-Q4_K_M) of the RTX 5070 Ti rows: the Qwen3.5-35B-A3B shape (40 layers, n_embd 2048,
    # 256 experts of FFN 512, 8 used, 16 heads / 2 KV heads of 256, vocab 248,320), laid out as qwen3moe with K/V in
    # every 4th layer (gated delta net in the others) and a shared expert of FFN 512; the MTP head is left out.
    Arch(
        "Qwen3.6-35B-A3B-UD-Q4_K_M",
        "Qwen3.6-35B-A3B (stand-in layout)",
        "qwen3moe",
        40,
        2048,
        16,
        2,
        256,
        256,
        8,
        512,
        248320,
        262144,
        LlamaFileType.MOSTLY_Q4_K_M,
        qk_norm=True,
        vocab_strings=False,
        full_attention_interval=4,
        n_ff_shexp=512,
    ),
    # the same stand-in layout at Q8_0 (every weight Q8_0), for the RTX 4060 Ti rows of the field table
    Arch(
        "Qwen3.6-35B-A3B-Q8_0",
        "Qwen3.6-35B-A3B (stand-in layout)",
        "qwen3moe",
        40,
        2048,
        16,
        2,
        256,
        256,
        8,
        512,
        248320,
        262144,
        LlamaFileType.MOSTLY_Q8_0,
        qk_norm=True,
        vocab_strings=False,
        full_attention_interval=4,
        n_ff_shexp=512,
    ),
)


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fits_blocks(qtype: T, row: int) -> bool:
    return row % GGML_QUANT_SIZES[qtype][0] == 0


def weight_type(a: Arch, kind: str, il: int, row: int) -> T:
    """The type llama.cpp's quantizer gives a 2-D/3-D weight of this file type."""
    if a.expert_types and kind.endswith("_exps"):
        gate_up, down, down_more = a.expert_types
        return gate_up if kind != "ffn_down_exps" else down_more if use_more_bits(il, a.n_layer) else down
    if a.ftype == LlamaFileType.MOSTLY_MXFP4_MOE:
        return T.MXFP4 if kind.endswith("_exps") else T.Q8_0
    if a.ftype == LlamaFileType.MOSTLY_Q8_0:
        return T.Q8_0
    if a.ftype == LlamaFileType.MOSTLY_IQ4_NL:
        return T.Q6_K if kind == "output" else T.IQ4_NL
    if kind == "output":
        return T.Q6_K if _fits_blocks(T.Q6_K, row) else T.Q8_0
    if kind in ("ffn_down_exps", "ffn_down"):
        return T.Q6_K if use_more_bits(il, a.n_layer) else T.Q4_K
    if kind in ("attn_v", "attn_k") and a.n_expert == 8:
        return T.Q8_0
    if kind == "attn_v":
        return T.Q6_K if use_more_bits(il, a.n_layer) else T.Q4_K
    if kind == "attn_output" and a.n_expert == 8:
        return T.Q5_K
    return T.Q4_K


def layer_tensors(a: Arch, il: int) -> list[tuple[str, T, list[int]]]:
    """One block's tensors, shapes in ggml order (ne0 = input size)."""
    q, kv = a.n_head * a.head_dim, a.n_head_kv * a.head_dim
    if (il + 1) % a.full_attention_interval == 0:
        weights = {"attn_q": [a.n_embd, q], "attn_k": [a.n_embd, kv], "attn_v": [a.n_embd, kv]}
    else:  # linear attention (gated delta net): no KV cache; its projections sized like attention's
        weights = {"ssm_in": [a.n_embd, q + 2 * kv]}
    weights |= {
        "attn_output": [q, a.n_embd],
        "ffn_gate_exps": [a.n_embd, a.n_ff_exp, a.n_expert],
        "ffn_up_exps": [a.n_embd, a.n_ff_exp, a.n_expert],
        "ffn_down_exps": [a.n_ff_exp, a.n_embd, a.n_expert],
    }
    if a.n_ff_shexp:
        weights |= {
            "ffn_gate_shexp": [a.n_embd, a.n_ff_shexp],
            "ffn_up_shexp": [a.n_embd, a.n_ff_shexp],
            "ffn_down_shexp": [a.n_ff_shexp, a.n_embd],
        }
    out = [(f"blk.{il}.{k}.weight", weight_type(a, k, il, shape[0]), shape) for k, shape in weights.items()]
    f32 = {"attn_norm": [a.n_embd], "ffn_norm": [a.n_embd], "ffn_gate_inp": [a.n_embd, a.n_expert]}
    if a.qk_norm:
        f32 |= {"attn_q_norm": [a.head_dim], "attn_k_norm": [a.head_dim]}
    out += [(f"blk.{il}.{k}.weight", T.F32, shape) for k, shape in f32.items()]
    if a.biases:
        bias = {
            "attn_q": [q],
            "attn_k": [kv],
            "attn_v": [kv],
            "attn_output": [a.n_embd],
            "ffn_gate_inp": [a.n_expert],
            "ffn_gate_exps": [a.n_ff_exp, a.n_expert],
            "ffn_up_exps": [a.n_ff_exp, a.n_expert],
            "ffn_down_exps": [a.n_embd, a.n_expert],
        }
        out += [(f"blk.{il}.{k}.bias", T.F32, shape) for k, shape in bias.items()]
        out.append((f"blk.{il}.attn_sinks.weight", T.F32, [a.n_head]))
    return out


def all_tensors(a: Arch) -> list[tuple[str, T, list[int]]]:
    embd_type = weight_type(a, "token_embd", 0, a.n_embd)
    out = [("token_embd.weight", embd_type, [a.n_embd, a.n_vocab])]
    for il in range(a.n_layer):
        out += layer_tensors(a, il)
    out += [
        ("output_norm.weight", T.F32, [a.n_embd]),
        ("output.weight", weight_type(a, "output", 0, a.n_embd), [a.n_embd, a.n_vocab]),
    ]
    return out


def metadata(a: Arch) -> dict:
    p = a.arch
    vocab = (
        {
            "tokenizer.ggml.tokens": StringArray([f"t{i}" for i in range(a.n_vocab)]),
            "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, [1] * a.n_vocab),
        }
        if a.vocab_strings
        else {f"{p}.vocab_size": a.n_vocab}
    )
    return {
        "general.architecture": p,
        "general.name": a.name,
        f"{p}.block_count": a.n_layer,
        f"{p}.context_length": a.n_ctx,
        f"{p}.embedding_length": a.n_embd,
        f"{p}.attention.head_count": a.n_head,
        f"{p}.attention.head_count_kv": a.n_head_kv,
        f"{p}.attention.key_length": a.head_dim,
        f"{p}.attention.value_length": a.head_dim,
        f"{p}.expert_count": a.n_expert,
        f"{p}.expert_used_count": a.n_expert_used,
        # llama (Mixtral) keeps the expert FFN size in feed_forward_length
        f"{p}.{'feed_forward_length' if p == 'llama' else 'expert_feed_forward_length'}": a.n_ff_exp,
        "tokenizer.ggml.model": "gpt2" if a.n_vocab > 32000 else "llama",
        **vocab,
        "general.quantization_version": 2,
        "general.file_type": int(a.ftype),
    }


def shard_plan(a: Arch) -> list[list[tuple[str, T, list[int]]]]:
    """Tensors per shard: whole layers, split as evenly as the count allows."""
    tensors = all_tensors(a)
    size = -(-len(tensors) // a.n_shards)
    return [tensors[i : i + size] for i in range(0, len(tensors), size)]


def write_model(a: Arch) -> list[Path]:
    shards = shard_plan(a)
    if len(shards) == 1:
        path = OUT / f"{a.file_stem}.gguf"
        path.write_bytes(header_bytes(metadata(a), shards[0]))
        return [path]
    paths = []
    for i, tensors in enumerate(shards):
        meta = metadata(a) if i == 0 else {}
        meta |= {
            "split.no": Scalar(GGUFValueType.UINT16, i),
            "split.count": Scalar(GGUFValueType.UINT16, len(shards)),
            "split.tensors.count": Scalar(GGUFValueType.INT32, sum(len(s) for s in shards)),
        }
        path = OUT / f"{a.file_stem}-{i + 1:05d}-of-{len(shards):05d}.gguf"
        path.write_bytes(header_bytes(meta, tensors))
        paths.append(path)
    return paths


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for a in MODELS:
        for path in write_model(a):
            print(f"{path.relative_to(OUT.parent.parent)}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
