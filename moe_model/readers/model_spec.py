"""The model facts the cache depends on, distilled from GGUF headers into a frozen ModelSpec."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGMLQuantizationType, Keys, LlamaFileType

from moe_model.errors import GGUFError
from moe_model.limits import (
    MAX_ARCH_CHARS,
    MAX_ECHO_CHARS,
    MAX_EMBEDDING,
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_FEED_FORWARD,
    MAX_FILE_TYPE,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_VOCAB,
    check_at_most,
    shown,
)
from moe_model.readers.gguf import CheckPath, GGUFHeader, TensorInfo, read_model_headers
from moe_model.readers.http import URL_TIMEOUTS, CheckUrl, only_http

# llama.cpp collects a layer's experts in this order (llama_moe_cache_layer_experts).
EXPERT_TENSOR_ORDER = ("ffn_gate_up_exps", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class ExpertTensor:
    """One 3-D expert tensor of a layer; `expert_bytes` is ggml's nb[2], one expert's slice."""

    name: str
    kind: str
    ggml_type: int
    type_name: str
    shape: tuple[int, int, int]
    expert_bytes: int

    @property
    def nbytes(self) -> int:
        return self.expert_bytes * self.shape[2]

    @property
    def layout_key(self) -> tuple[int, tuple[int, int, int], int]:
        """What llama_moe_cache_same_layout compares: type, shape and expert stride."""
        return (self.ggml_type, self.shape, self.expert_bytes)


@dataclass(frozen=True)
class LayerSpec:
    """One transformer block: its expert tensors in llama.cpp's order, and the bytes of the rest."""

    index: int
    experts: tuple[ExpertTensor, ...]
    dense_bytes: int
    dense_params: int = 0  # elements of the layer's other tensors (attention, norms, router, shared experts)
    has_kv: bool = True  # the layer has attention K/V (hybrid models: only full-attention layers keep a KV cache)

    @property
    def has_experts(self) -> bool:
        return bool(self.experts)

    @cached_property  # read per layer by every time-model call: computed once
    def slot_bytes(self) -> int:
        """Bytes of one cache slot: one expert's slice of every expert tensor (sum of nb[2])."""
        return sum(t.expert_bytes for t in self.experts)

    @cached_property  # read per layer by every time-model call: computed once
    def expert_bytes_total(self) -> int:
        return sum(t.nbytes for t in self.experts)

    @property
    def layout_key(self) -> tuple:
        return tuple(t.layout_key for t in self.experts)

    @cached_property  # read per layer by every time-model call: computed once
    def expert_params(self) -> int:
        """Weights of one expert (every expert tensor's slice)."""
        return sum(t.shape[0] * t.shape[1] for t in self.experts)


@dataclass(frozen=True)
class ModelSpec:
    """What the explorer needs to know about a MoE model, all read from its GGUF header(s)."""

    architecture: str
    name: str
    file_type: int | None
    n_layer: int
    n_expert: int
    n_expert_used: int
    n_embd: int
    n_ff_exp: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    layers: tuple[LayerSpec, ...]
    other_bytes: int  # tensors outside the blocks: token_embd, output, output_norm
    input_bytes: int = 0  # token_embd: llama.cpp keeps the input layer in host memory
    n_tensors: int = 0  # tensors in all shards (llama.cpp sizes its graph from them)

    @property
    def file_type_name(self) -> str:
        if self.file_type is None:
            return "unknown"
        try:
            return LlamaFileType(self.file_type).name.removeprefix("MOSTLY_")
        except ValueError:
            return f"file type {self.file_type}"

    @cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    def __hash__(self) -> int:  # the time model's caches key on the model: its layers hashed once, not per call
        return self._hash

    def __getstate__(self) -> dict:  # str hashes are salted per process: a pickle never carries one
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}

    @cached_property  # read per layer by every time-model call: computed once
    def expert_bytes_total(self) -> int:
        return sum(layer.expert_bytes_total for layer in self.layers)

    @property
    def dense_bytes_total(self) -> int:
        return sum(layer.dense_bytes for layer in self.layers) + self.other_bytes

    @property
    def total_bytes(self) -> int:
        return self.expert_bytes_total + self.dense_bytes_total

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(layer.index for layer in self.layers if layer.has_experts)

    @cached_property  # read per layer by every time-model call: computed once
    def kv_layers(self) -> int:
        """Layers that keep a KV cache (llama_kv_cache skips recurrent / linear-attention layers)."""
        return sum(layer.has_kv for layer in self.layers)

    @cached_property  # read per layer by every time-model call: computed once
    def active_params(self) -> int:
        """Weights one token multiplies: every layer's dense part and k experts (the output head excluded)."""
        return sum(layer.dense_params + self.n_expert_used * layer.expert_params for layer in self.layers)


def ggml_type_name(ggml_type: int) -> str:
    """ggml_type_name(): lower case except the K of k-quants ("q6_K", "mxfp4", "iq4_nl")."""
    return GGMLQuantizationType(ggml_type).name.lower().replace("_k", "_K")


def _meta_int(meta: dict[str, Any], key: str, most: int, default: int | None = None) -> int | None:
    """An integer metadata value (a per-layer array: its largest item, which llama.cpp sizes by) in 0..most."""
    value = meta.get(key, default)
    values = value if isinstance(value, tuple) else (value,)
    if not values or values == (None,):
        return default
    for item in values:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item):
            raise GGUFError(f"corrupt GGUF header: {key} is {shown(repr(item))}, not a number")
    check_at_most(int(min(values)), most, key, GGUFError)  # a negative size gives impossible numbers downstream
    check_at_most(int(max(values)), most, key, GGUFError)
    return int(max(values))


def _hparam(meta: dict[str, Any], arch: str, key: str, most: int, default: int | None = None) -> int | None:
    """An architecture's hyperparameter: `key` a gguf.Keys name whose {arch} placeholder is `arch`, in 0..most."""
    return _meta_int(meta, key.format(arch=arch), most, default)


def _expert_tensor(info: TensorInfo, kind: str, n_expert: int) -> ExpertTensor:
    """One expert tensor [ne0, ne1, n_expert]; an empty dimension would make an expert of 0 bytes."""
    if len(info.shape) != 3 or 0 in info.shape:
        raise GGUFError(f"expert tensor {shown(info.name)} is not 3-D with every dimension >= 1: {list(info.shape)}")
    shape = (info.shape[0], info.shape[1], info.shape[2])
    if shape[2] != n_expert:  # llama.cpp's create_tensor refuses this shape too
        raise GGUFError(f"expert tensor {shown(info.name)} holds {shape[2]:,} experts, the header says {n_expert:,}")
    return ExpertTensor(info.name, kind, info.ggml_type, ggml_type_name(info.ggml_type), shape, info.stride_bytes(2))


def _check_every_layer(tensors: Sequence[TensorInfo], n_layer: int, n_shards: int) -> None:
    """Every block of a split model has tensors in some shard: a shard missing one would be planned without it."""
    present = {int(m.group(1)) for t in tensors if (m := _BLOCK_RE.match(t.name))}
    missing = sorted(set(range(n_layer)) - present)
    if missing:
        raise GGUFError(
            f"layer {missing[0]} of {n_layer} ({len(missing)} in all) has no tensors in any of the {n_shards} "
            "shards: a shard is damaged or of another model"
        )


def _build_layers(tensors: Sequence[TensorInfo], n_layer: int, n_expert: int) -> tuple[tuple[LayerSpec, ...], int, int]:
    experts: dict[int, dict[str, ExpertTensor]] = {i: {} for i in range(n_layer)}
    dense = [0] * n_layer
    dense_params = [0] * n_layer
    has_kv = [False] * n_layer
    other = inputs = 0
    for info in tensors:
        match = _BLOCK_RE.match(info.name)
        if match is None or int(match.group(1)) >= n_layer:
            other += info.nbytes
            inputs += info.nbytes if info.name.startswith("token_embd.") else 0
            continue
        il, rest = int(match.group(1)), match.group(2)
        kind = rest.removesuffix(".weight")
        if kind in EXPERT_TENSOR_ORDER and rest.endswith(".weight"):
            experts[il][kind] = _expert_tensor(info, kind, n_expert)
        else:
            dense[il] += info.nbytes
            dense_params[il] += math.prod(info.shape)
            has_kv[il] |= kind in ("attn_k", "attn_qkv", "attn_kv_a_mqa")
    if not any(has_kv):  # a header without attention tensors: assume every layer keeps K/V
        has_kv = [True] * n_layer
    layers = tuple(
        LayerSpec(
            il,
            tuple(experts[il][k] for k in EXPERT_TENSOR_ORDER if k in experts[il]),
            dense[il],
            dense_params[il],
            has_kv[il],
        )
        for il in range(n_layer)
    )
    return layers, other, inputs


def _architecture(meta: dict[str, Any]) -> str:
    """The architecture (gguf.Keys.General.ARCHITECTURE): a short name that prefixes the model's keys (quoted in
    messages, so bounded)."""
    arch = meta.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        raise GGUFError(f"the GGUF header has no {Keys.General.ARCHITECTURE}: not a llama.cpp model file")
    if not 0 < len(arch) <= MAX_ARCH_CHARS:
        raise GGUFError(
            f"{Keys.General.ARCHITECTURE} {shown(arch, 40)!r} has {len(arch):,} characters: not a llama.cpp "
            f"architecture (this tool reads names of 1..{MAX_ARCH_CHARS})"
        )
    return arch


def spec_from_headers(headers: Sequence[GGUFHeader]) -> ModelSpec:
    """Build the ModelSpec of a model from its headers (shard 1 carries the metadata)."""
    meta = dict(headers[0].metadata)
    arch = _architecture(meta)
    n_layer = _hparam(meta, arch, Keys.LLM.BLOCK_COUNT, MAX_LAYERS)
    n_expert = _hparam(meta, arch, Keys.LLM.EXPERT_COUNT, MAX_EXPERTS, 0)
    n_used = _hparam(meta, arch, Keys.LLM.EXPERT_USED_COUNT, MAX_EXPERTS_USED, 0)
    if not n_layer or not n_expert or not n_used:
        raise GGUFError(
            f"{arch} model without experts ({Keys.LLM.EXPERT_COUNT.format(arch=arch)} = {n_expert}): "
            "the MoE cache needs a MoE model"
        )
    if n_used > n_expert:  # each count is in range already (_meta_int), before anything is built per layer
        raise GGUFError(f"corrupt GGUF header: {arch} routes {n_used} experts per token but has only {n_expert}")
    tensors = [t for h in headers for t in h.tensors]
    if len(headers) > 1:
        _check_every_layer(tensors, n_layer, len(headers))
    layers, other, inputs = _build_layers(tensors, n_layer, n_expert)
    if not any(layer.has_experts for layer in layers):
        raise GGUFError("no blk.N.ffn_*_exps tensors found: is this the first shard of a split model?")
    n_embd = _hparam(meta, arch, Keys.LLM.EMBEDDING_LENGTH, MAX_EMBEDDING, 0) or 0
    n_head = _hparam(meta, arch, Keys.Attention.HEAD_COUNT, MAX_HEADS, 0) or 0
    head_dim = n_embd // n_head if n_head else 0
    first_experts = next(layer for layer in layers if layer.has_experts).experts
    tokens = meta.get(Keys.Tokenizer.LIST)
    return ModelSpec(
        architecture=arch,
        name=shown(str(meta.get(Keys.General.NAME, "unnamed")), MAX_ECHO_CHARS),
        file_type=_meta_int(meta, Keys.General.FILE_TYPE, MAX_FILE_TYPE),
        n_layer=n_layer,
        n_expert=n_expert,
        n_expert_used=n_used,
        n_embd=n_embd,
        n_ff_exp=_hparam(meta, arch, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, MAX_FEED_FORWARD, first_experts[-1].shape[0])
        or 0,
        n_head=n_head,
        n_head_kv=_hparam(meta, arch, Keys.Attention.HEAD_COUNT_KV, MAX_HEADS, n_head) or 0,
        head_dim_k=_hparam(meta, arch, Keys.Attention.KEY_LENGTH, MAX_HEAD_DIM, head_dim) or 0,
        head_dim_v=_hparam(meta, arch, Keys.Attention.VALUE_LENGTH, MAX_HEAD_DIM, head_dim) or 0,
        n_vocab=_hparam(meta, arch, Keys.LLM.VOCAB_SIZE, MAX_VOCAB, getattr(tokens, "count", 0)) or 0,
        layers=layers,
        other_bytes=other,
        input_bytes=inputs,
        n_tensors=len(tensors),
    )


def load_model(
    source: str | Path | bytes | bytearray | BinaryIO,
    timeouts: tuple[float, float] = URL_TIMEOUTS,
    check_url: CheckUrl = only_http,
    check_path: CheckPath = str,
) -> ModelSpec:
    """Read a model's header(s) from a path, URL, prefix bytes or file object into a ModelSpec.

    `check_url` vets a URL and every redirect target (sources.check_url also refuses private hosts and pins
    the addresses it checked), `check_path` every shard's path (sources.check_path: the allowed folders);
    `timeouts` are (connect, each read) in seconds."""
    return spec_from_headers(read_model_headers(source, timeouts, check_url, check_path))


def uniform_spec(n_layer: int, n_expert: int, n_expert_used: int, name: str = "uniform") -> ModelSpec:
    """A model whose layers all share one expert layout of exactly 1 MiB per slot (F32 256x1024).

    One group, so one LRU over every (layer, expert): `--moe-cache-mib n+1` buys exactly n slots.
    Used to simulate routing shapes that have no GGUF at hand.
    """
    from gguf import GGMLQuantizationType as T

    expert = ExpertTensor("ffn_down_exps", "ffn_down_exps", int(T.F32), "f32", (256, 1024, n_expert), 256 * 1024 * 4)
    layers = tuple(LayerSpec(il, (replace(expert, name=f"blk.{il}.ffn_down_exps.weight"),), 0) for il in range(n_layer))
    return ModelSpec(name, name, None, n_layer, n_expert, n_expert_used, 0, 0, 0, 0, 0, 0, 0, layers, 0)
