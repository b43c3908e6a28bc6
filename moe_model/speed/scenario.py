"""A llama-server configuration (Scenario) and how llama.cpp lays it out on a machine (Layout).

The placement is one typed contract for `--cpu-moe`, `--n-cpu-moe K`, `-ngl`, `--tensor-split` and
`--fit` (slot_plan.Placement); `resolve` turns `--fit` into the layer count it would pick.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.limits import (
    DEFAULT_ACCEPT_RATE,
    DEFAULT_CTX,
    DEFAULT_PROMPT_TOKENS,
    DEFAULT_UBATCH,
    MAX_BUDGET_MIB,
    MAX_BUILD,
    MAX_CONCURRENCY,
    MAX_CTX,
    MAX_DRAFT_TOKENS,
    MAX_LAYERS,
    MAX_PROMPT_TOKENS,
    MAX_UBATCH,
    MAX_VRAM_GIB,
    check_at_most,
)
from moe_model.llama.builds import (
    CLASS_LRU_BUILD,
    CPU_SHARE_BUILD,
    FIRST_CACHE_BUILD,
    MAINLINE_BUILD,
    NAMED_RELEASES,
    check_build,
    check_cache_flags,
    parse_build,
)
from moe_model.llama.offload import LayerMap
from moe_model.llama.pool_rule import OFFLOAD_MIN_BATCH, uses_pool
from moe_model.llama.slot_plan import CachePlan, Placement, layer_map, plan_cache
from moe_model.policies.knobs import SHARE, KnobPairs, flag_value, knob_pairs
from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import Alias, Widget, check_declared, setting
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import HostMemory, host_memory
from moe_model.speed.vram import (
    DEFAULT_KV_TYPE,
    FIT_MARGIN_MIB,
    KV_TYPES,
    MemoryFlags,
    VramBreakdown,
    breakdown,
    fit_host_layers,
    max_budget_mib,
)

LOAD_MODES = ("mmap", "none", "mlock", "dio")  # -lm; all but mmap load --cpu-moe experts into pinned CUDA_Host memory
FLASH_ATTN = ("auto", "on", "off")  # -fa; auto turns it on where the backend supports it (CUDA, HIP, Vulkan do)
DEFAULT_N_PREDICT = 256  # tokens a request generates (llama-server -n), for the first request's cost
PLACEMENT_HELP = "where the experts go: cpu-moe | fit | n-cpu-moe:K | gpu (first K layers' experts in host memory)"


def _depth(text: str) -> int:
    """A --depth value: a whole number of tokens in 0..MAX_CTX."""
    if not text.isdigit():
        raise MoeModelError(f"--depth takes a whole number of tokens, got {text!r}")
    check_at_most(int(text), MAX_CTX, "the depth")
    return int(text)


def _placement(text: str) -> str:
    """A --placement value, checked: cpu-moe, fit, gpu or n-cpu-moe:K."""
    return Placement.parse(text).text


@dataclass(frozen=True)
class Request:
    """What a client asks of the server, apart from how the server runs (Scenario.request): streams decoding at once,
    speculation (draft tokens per verification, their acceptance), each prompt's tokens, the context depth decoding
    reads (None: the prompt's) and the tokens a reply generates. Its fields are Scenario's, declared and checked
    there, so its flags and JSON fields keep their names."""

    concurrency: int
    draft_tokens: int
    accept_rate: float
    prompt_tokens: int
    depth: int | None
    n_predict: int

    @property
    def batching_fields(self) -> dict[str, object]:
        """What decode batching reads of the request (Batching's streams and drafting), by Batching's names."""
        return {"concurrency": self.concurrency, "draft_tokens": self.draft_tokens, "accept_rate": self.accept_rate}


@dataclass(frozen=True)
class Scenario:
    """A llama-server configuration: placement, budget, concurrency, speculation, CPU share, memory flags, the
    request (its prompt, the context depth decoding reads, default the prompt, and its length), and the llama.cpp
    build, which decides the replacement policy (b11480-b12169 LRU, b12170+ ClassLRU) and the flags.

    Each field's setting (moe_model.settings) is the one source of its default, help, CLI flags, URL key and
    widget range."""

    placement: Placement = setting(
        factory=Placement,
        help=PLACEMENT_HELP,
        flags=("--placement",),
        parse=_placement,
        metavar="PLACEMENT",
        aliases=(
            Alias("--cpu-moe", "cpu-moe", "same as --placement cpu-moe (llama.cpp's flag)"),
            Alias(
                "--n-cpu-moe", "n-cpu-moe:{}", "same as --placement n-cpu-moe:K (llama.cpp's flag)", "K", 0, MAX_LAYERS
            ),
        ),
    )
    budget_mib: int = setting(
        0,
        help="--moe-cache-mib value (whole MiB)",
        flags=("--budget-mib",),
        llama_flags=("--moe-cache-mib",),
        llama_default=0,  # off (b11549 arg.cpp; include/llama.h moe_cache_size)
        lo=0,
        hi=MAX_BUDGET_MIB,
        url_key="budget",
        widget=Widget("--moe-cache-mib", lo=0, step=1, start=10000),
    )
    concurrency: int = setting(
        1,
        help="sequences decoding at once (-np)",
        flags=("--concurrency",),
        llama_flags=("-np", "--parallel"),
        llama_default=-1,  # llama-server's auto: 4 slots, unified KV (b11549 arg.cpp, tools/server/server.cpp)
        lo=1,
        hi=MAX_CONCURRENCY,
        url_key="np",
        widget=Widget("concurrent streams (-np)", lo=1, hi=8),
    )
    draft_tokens: int = setting(
        0,
        help="speculative draft tokens per verification (--spec-draft-n-max)",
        flags=("--draft",),
        # b11549 removed --draft-max (arg.cpp: "use --spec-draft-n-max"): read, never printed; nothing is drafted
        # without a draft model, so 0 is the server's default here (n_max's own 3 applies once -md is given)
        llama_flags=("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n"),
        llama_default=0,
        lo=0,
        hi=MAX_DRAFT_TOKENS,
        url_key="draft",
        widget=Widget("draft tokens (speculative)", lo=0, hi=8),
    )
    accept_rate: float = setting(
        DEFAULT_ACCEPT_RATE,
        help="draft acceptance rate",
        flags=("--accept",),
        lo=0.0,
        hi=1.0,
        url_key="accept",
        widget=Widget("draft acceptance", lo=0.0, hi=1.0, step=0.05),
    )
    # the policy's knobs, (name, value) sorted by name (policies.knobs): `--knob NAME=VALUE`, `--cpu-share F`
    knobs: KnobPairs = ()
    n_ctx: int = setting(
        DEFAULT_CTX,
        help="context size (-c)",
        flags=("--ctx",),
        llama_flags=("-c", "--ctx-size"),
        llama_default=0,  # the model's trained context (b11549 common.h): never this tool's, so always printed
        lo=1,
        hi=MAX_CTX,
        url_key="ctx",
        widget=Widget("context (-c)", "number", lo=512, hi=1_048_576, step=512),
    )
    prompt_tokens: int = setting(
        DEFAULT_PROMPT_TOKENS,
        help="prompt tokens per request",
        flags=("--prompt-tokens",),
        lo=1,
        hi=MAX_PROMPT_TOKENS,
        url_key="prompt",
        widget=Widget("prompt tokens per request", "number", lo=1, hi=131_072, step=64),
    )
    n_ubatch: int = setting(
        DEFAULT_UBATCH,
        help="ubatch size (-ub)",
        flags=("--ubatch-size", "-ub"),
        lo=1,
        hi=MAX_UBATCH,
        llama_flags=("-ub", "--ubatch-size"),
        llama_default=DEFAULT_UBATCH,
    )
    load_mode: str = setting(
        "mmap",
        help="how llama.cpp loads the host experts (-lm): all but mmap pin them (CUDA_Host)",
        flags=("--load-mode",),
        choices=LOAD_MODES,
        url_key="lm",
        widget=Widget("host experts (--load-mode)", "selectbox", options=LOAD_MODES),
        aliases=(Alias("--pinned", "none", "same as --load-mode none (pinned host experts)"),),
        llama_flags=("--load-mode", "-lm"),
        llama_default="mmap",  # b11549's -lm auto: "mmap, unless a device does not support it" (CUDA does)
    )
    cache_type_k: str = setting(
        DEFAULT_KV_TYPE,
        help="K cache type (-ctk)",
        flags=("--cache-type-k", "-ctk"),
        choices=KV_TYPES,
        llama_flags=("-ctk", "--cache-type-k"),
        llama_default=DEFAULT_KV_TYPE,
    )
    cache_type_v: str = setting(
        DEFAULT_KV_TYPE,
        help="V cache type (-ctv)",
        flags=("--cache-type-v", "-ctv"),
        choices=KV_TYPES,
        llama_flags=("-ctv", "--cache-type-v"),
        llama_default=DEFAULT_KV_TYPE,
    )
    fit_target_mib: float = setting(
        float(FIT_MARGIN_MIB),
        help="--fit's free-memory target per device (-fitt, MiB)",
        flags=("--fit-target-mib",),
        lo=0.0,
        hi=MAX_VRAM_GIB * 1024.0,
        llama_flags=("--fit-target", "-fitt"),
        llama_default=float(FIT_MARGIN_MIB),
    )
    offload_min_batch: int = setting(
        OFFLOAD_MIN_BATCH,
        help="GGML_OP_OFFLOAD_MIN_BATCH: smaller ubatches that bypass the pool stay on the CPU",
        flags=("--offload-min-batch",),
        lo=1,
        hi=MAX_UBATCH,
        llama_env="GGML_OP_OFFLOAD_MIN_BATCH",
        llama_default=OFFLOAD_MIN_BATCH,
    )
    policy: str = setting(
        "",
        help="price another replacement policy's counts (what-if; see docs/cli.md); empty: the build's and flags'",
        flags=("--policy",),
        metavar="NAME",
    )
    # ClassLRU's open readings as a user's own b12170+ logs picked them (calibrate's machine file): replayed alone
    policy_reading: tuple[tuple[str, str], ...] = ()
    depth: int | None = setting(
        None,
        help="tokens already in the context when decoding (default: the prompt)",
        flags=("--depth",),
        parse=_depth,
        metavar="N",
        url_key="depth",
        widget=Widget(
            "context depth when decoding (tokens per stream)",
            "number",
            lo=0,
            hi=1_048_576,
            step=1024,
            start=DEFAULT_PROMPT_TOKENS,  # where the library's depth starts: the default prompt's
        ),
    )
    flash_attn: str = setting(
        "auto",
        help="flash attention (llama.cpp -fa; auto: on)",
        flags=("--flash-attn", "-fa"),
        choices=FLASH_ATTN,
        llama_flags=("-fa", "--flash-attn"),
        llama_default="auto",
    )
    no_kv_offload: bool = setting(
        False,
        help="K and V kept and attended in host memory (llama.cpp --no-kv-offload)",
        flags=("--no-kv-offload",),
        llama_flags=("--no-kv-offload", "-nkvo"),
        llama_default=False,
    )
    # a request's (its n_predict): the server's -n would cap every reply, so the printed command carries none
    n_predict: int = setting(
        DEFAULT_N_PREDICT,
        help="tokens a request generates (llama-server -n), for the first request's cost",
        flags=("--n-predict",),
        lo=1,
        hi=MAX_CTX,
    )
    build: int = setting(
        MAINLINE_BUILD,
        help=f"llama.cpp build the server runs: b{FIRST_CACHE_BUILD}-b{CLASS_LRU_BUILD - 1} plain LRU (exact), "
        f"b{CLASS_LRU_BUILD}+ ClassLRU (modelled), --moe-cache-cpu-share from b{CPU_SHARE_BUILD} "
        f"(default: b{MAINLINE_BUILD}, current mainline); release v1.0.0 is read as b{NAMED_RELEASES['1.0.0']}",
        flags=("--build",),
        lo=1,
        hi=MAX_BUILD,
        parse=parse_build,
        metavar="NNNNN",
        url_key="build",
        widget=Widget(f"llama.cpp build (b{MAINLINE_BUILD}, {MAINLINE_BUILD} or v1.0.0)", "text", lo=1, hi=MAX_BUILD),
    )

    def __post_init__(self) -> None:
        check_build(self.build)
        check_declared(self)  # each field within its setting's range or choices; the cross-field rules follow
        object.__setattr__(self, "knobs", knob_pairs(self.knobs, keep_off=bool(self.policy)))
        if self.policy or self.knobs:
            from moe_model.policies import scenario_knobs  # lazy: `plan` never needs the kernels

            # an unknown policy name raises there, listing the names; policy_name reads the share checked (flag_value)
            object.__setattr__(self, "knobs", scenario_knobs(self.policy_name, self.knobs, bool(self.policy)))
        check_cache_flags(self.build, self.budget_mib, self.cpu_share)
        check_at_most(self.context_depth, MAX_CTX, "the depth")
        if self.depth is not None and context_cells(self.depth, self.concurrency) > self.n_ctx:
            raise MoeModelError(
                f"the depth ({self.depth:,} tokens x {self.concurrency} stream(s)) does not fit the context "
                f"(-c {self.n_ctx:,}): raise --ctx to {context_cells(self.depth, self.concurrency):,}"
            )

    @property
    def request(self) -> Request:
        """The request fields as one record (replace(sc, **asdict(request)) sets them back)."""
        return Request(**{f.name: getattr(self, f.name) for f in fields(Request)})

    @property
    def pinned(self) -> bool:
        """Host experts in pinned memory (CUDA_Host): every load mode but mmap (b11549 load_tensors)."""
        return self.load_mode != "mmap"

    @property
    def context_depth(self) -> int:
        """Tokens in the context while decoding: the depth given, else the prompt's."""
        return self.prompt_tokens if self.depth is None else self.depth

    @property
    def kv_offload(self) -> bool:
        return not self.no_kv_offload

    @property
    def flash_attn_on(self) -> bool:
        return self.flash_attn != "off"

    @property
    def kv_types(self) -> tuple[str, str]:
        return self.cache_type_k, self.cache_type_v

    @property
    def memory_flags(self) -> MemoryFlags:
        """The flags that size GPU memory beside the weights and the cache, for the VRAM functions."""
        return MemoryFlags(
            n_ctx=self.n_ctx,
            n_ubatch=self.n_ubatch,
            kv_types=self.kv_types,
            offload_min_batch=self.offload_min_batch,
            margin_mib=self.fit_target_mib,
            flash_attn=self.flash_attn_on,
            kv_offload=self.kv_offload,
        )

    @property
    def prompt_ubatch(self) -> int:
        return max(1, min(self.n_ubatch, self.prompt_tokens))

    @property
    def tokens_per_ubatch(self) -> int:
        return self.concurrency * (self.draft_tokens + 1)

    @property
    def decoded_per_ubatch(self) -> float:
        """Generated tokens per verification step: 1 + the expected leading run of accepted drafts."""
        p, d = self.accept_rate, self.draft_tokens
        return self.concurrency * (1 + sum(p**i for i in range(1, d + 1)))

    @property
    def policy_name(self) -> str:
        """The replacement policy modelled: the one named, else what the build and flags select."""
        from moe_model.policies import policy_for_build

        return self.policy or policy_for_build(self.build, self.cpu_share)

    @property
    def policy_exact(self) -> bool:
        """Whether the hit rates of this scenario come from an exact transcription (b11549's LRU) or a model."""
        from moe_model.policies import EXACT, get_policy

        return get_policy(self.policy_name).label == EXACT

    @property
    def hit_rate_wording(self):
        """The words beside this scenario's hit rates (policies.wording): exact or modelled, and whose."""
        from moe_model.policies.wording import hit_rate_wording

        return hit_rate_wording(self.policy_name, self.build, self.cpu_share)

    @property
    def cpu_share(self) -> float:
        """--moe-cache-cpu-share F as the server runs with it (0: not given), from the CPU share's knob."""
        return flag_value(self.knobs, SHARE)

    @property
    def policy_knobs(self) -> dict[str, object]:
        """The knobs the policy runs with: the calibration's reading and the scenario's knobs, those it declares."""
        from moe_model.policies import get_policy

        return get_policy(self.policy_name).own_knobs((*self.policy_reading, *self.knobs))

    def with_knobs(self, knobs: dict[str, object]) -> Scenario:
        """This scenario with `knobs` set (a flag knob at its off value: left out)."""
        return replace(self, knobs=tuple((dict(self.knobs) | knobs).items()))

    def kernel(self):
        """The simulate Kernel of the scenario's policy, or None for a policy that replays per budget."""
        from moe_model.policies import get_policy

        make = get_policy(self.policy_name).kernel
        return make(**self.policy_knobs) if make else None

    def band_kernel(self):
        """kernel(), with a modelled policy's other readings replayed beside it as a band where it has them."""
        from moe_model.policies import get_policy

        policy = get_policy(self.policy_name)
        return policy.band_kernel() if policy.band_kernel and not self.policy_knobs else self.kernel()

    def policy_fields(self) -> dict:
        """What every output that shows a hit rate carries: which policy produced it, exact or not, the build."""
        return {"policy": self.policy_name, "policy_exact": self.policy_exact, "build": self.build}

    def as_dict(self) -> dict:
        """The JSON's scenario: its fields, the --placement string and the knobs by name, with `cpu_share` the
        JSON has always carried."""
        out = asdict(self) | {"placement": self.placement.text, "knobs": dict(self.knobs)}
        return out | {"cpu_share": self.cpu_share}

    def with_budget(self, budget_mib: int) -> Scenario:
        return replace(self, budget_mib=budget_mib)


@dataclass(frozen=True)
class Layout:
    """How a scenario lands on a machine, decided once (`resolve`): the resolved placement, where each layer's dense
    weights, experts and KV cache live, the cache plan, and the VRAM and host RAM accounts, both sums over `layers`.
    Every consumer (slot plan, VRAM, RAM, the time model, the answers) reads it instead of deciding again."""

    placement: Placement
    plan: CachePlan
    vram: VramBreakdown
    layers: LayerMap
    ram: HostMemory

    @property
    def host_layers(self) -> tuple[int, ...]:
        """Layers whose routed experts are in host memory (an override, or -ngl leaving the layer on the CPU)."""
        return self.layers.on_host("experts")

    @property
    def cpu_layers(self) -> tuple[int, ...]:
        """Layers -ngl leaves entirely on the CPU."""
        return self.layers.on_host("dense")

    @property
    def fits(self) -> bool:
        return self.vram.fits

    @property
    def runs(self) -> bool:
        """The server starts and a speed is shown: the plan starts, VRAM fits or is too close to call, and the RAM
        holds it or its mmap'd experts stream from disk (HostMemory.state)."""
        return self.plan.starts and (self.vram.fits or self.vram.tight) and self.ram.runs

    def cached_mask(self, model: ModelSpec, tokens_per_ubatch: int) -> np.ndarray:
        """Layers whose decode ubatches use the pool: a cached group with enough slots (get_slot_map)."""
        mask = np.zeros(model.n_layer, dtype=bool)
        if not self.plan.starts:
            return mask
        for group in self.plan.groups:
            if group.cached and uses_pool(tokens_per_ubatch, model.n_expert_used, model.n_expert, group.n_slots):
                mask[list(group.layers)] = True
        return mask


def context_cells(depth: int, concurrency: int) -> int:
    """The KV cells `concurrency` streams `depth` tokens deep hold: the context (-c) they need (llama.cpp allocates
    the KV cache for -c cells, which the -np streams share)."""
    return depth * concurrency


def context_for_depth(n_ctx: int, depth: int, concurrency: int) -> int:
    """The context (-c) a server needs to decode `concurrency` streams `depth` tokens deep: the one chosen, raised
    where it cannot hold them (up to the largest the library takes)."""
    return min(max(n_ctx, context_cells(depth, concurrency)), MAX_CTX)


def cache_room_mib(model: ModelSpec, hw: Hardware, sc: Scenario, placement: Placement) -> int:
    """The largest --moe-cache-mib that fits beside this scenario's context, KV cache and buffers, with its --fit
    target free: the VRAM check `resolve` makes, so a budget within it is one resolve says fits."""
    return max_budget_mib(model, hw, placement, sc.memory_flags)


def fit_layers(model: ModelSpec, hw: Hardware, sc: Scenario, placement: Placement, budget_mib: int = 0) -> int:
    """The layers whose experts --fit moves to host memory for this scenario's context, ubatch, KV cache and
    buffers: as many as the VRAM check `resolve` makes needs."""
    return fit_host_layers(model, hw, sc.memory_flags, budget_mib, placement)


def resolve(model: ModelSpec, hw: Hardware, sc: Scenario) -> Layout:
    """Turn a scenario into llama.cpp's placement (--fit resolved), its layer map, cache plan, VRAM and RAM."""
    placement = sc.placement
    if placement.fit_runs:
        placement = replace(placement, n_cpu_moe=fit_layers(model, hw, sc, placement, sc.budget_mib))
    elif placement.fit:  # -ngl given: llama.cpp aborts the fit and loads what -ngl says
        placement = replace(placement, fit=False)
    plan = plan_cache(model, sc.budget_mib, replace(placement, fit=False))
    vram = breakdown(model, hw, placement, sc.budget_mib, sc.memory_flags, plan=plan)
    ram = host_memory(model, hw, placement, sc.memory_flags, sc.load_mode)
    return Layout(placement, plan, vram, layer_map(model, placement, sc.kv_offload), ram)
