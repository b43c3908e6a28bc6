"""A toy MoE model and workload small enough to watch the cache slot by slot (the Learn page).

4 layers, 12 experts, 2 per token; every slot is exactly 3 MiB (three F32 256x1024 tensors), so a
budget in MiB buys (budget / groups / 3) - 1 slots per group. With `mixed`, the odd layers store
ffn_down as F16 512x1024 (same bytes, other type), which puts them in a second group, like the
Q6_K/Q4_K down tensors of a Q4_K_M file.
"""

from __future__ import annotations

from gguf import GGMLQuantizationType as T
from gguf import Keys

from moe_model.llama.batching import build_workload
from moe_model.readers.gguf_writer import header_bytes
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.routing.synthetic import Knobs, Shape, generate
from moe_model.workload import Batching, Workload

N_LAYER, N_EXPERT, K = 4, 12, 2
ARCH = "qwen3moe"
TOY_UBATCH = 64  # prompts in ubatches of 64 tokens: a short prompt shows both the copy path and the pool


def toy_model(mixed: bool = True, n_layer: int = N_LAYER, n_expert: int = N_EXPERT, k: int = K) -> ModelSpec:
    """A qwen3moe header with 3 MiB slots; `mixed` gives the odd layers their own group."""
    meta = {
        Keys.General.ARCHITECTURE: ARCH,
        Keys.General.NAME: "toy",
        Keys.LLM.BLOCK_COUNT.format(arch=ARCH): n_layer,
        Keys.LLM.EXPERT_COUNT.format(arch=ARCH): n_expert,
        Keys.LLM.EXPERT_USED_COUNT.format(arch=ARCH): k,
    }
    tensors = []
    for il in range(n_layer):
        down = (T.F16, [512, 1024, n_expert]) if mixed and il % 2 else (T.F32, [256, 1024, n_expert])
        tensors += [
            (f"blk.{il}.ffn_gate_exps.weight", T.F32, [256, 1024, n_expert]),
            (f"blk.{il}.ffn_up_exps.weight", T.F32, [256, 1024, n_expert]),
            (f"blk.{il}.ffn_down_exps.weight", down[0], down[1]),
        ]
    return load_model(header_bytes(meta, tensors))


def toy_workload(
    concurrency: int = 1, draft: int = 0, prompt_tokens: int = 0, n_tokens: int = 48, seed: int = 1
) -> Workload:
    trace = generate(
        Shape(N_LAYER, N_EXPERT, K),
        Knobs(skew=1.0, working_set=0.5, drift=0.02, reuse=0.4),
        n_tokens,
        seq_len=max(4, n_tokens // max(concurrency, 1)),
        seed=seed,
        label="toy routing",
    )
    batching = Batching(concurrency, draft, prompt_tokens=prompt_tokens, ubatch_size=TOY_UBATCH, seed=seed)
    return build_workload(trace, batching, N_EXPERT)
