"""The synthetic workloads the curve replays where the user gives no routing: the model's routing preset (a model),
generated once per token count and batched as a scenario's server would."""

from __future__ import annotations

import threading

from moe_model.llama.batching import build_workload, server_batching
from moe_model.llama.server_warm_up import start_up_probe
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import Shape, generate_stored, preset_for
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching, TokenTrace, Workload

SYNTHETIC_TOKENS = 4000  # the tokens predict, recommend, Explore and the calibration replay: one number everywhere


def synthetic_workload(
    model: ModelSpec, sc: Scenario, seed: int = 0, n_tokens: int = SYNTHETIC_TOKENS, prompts: bool = False
) -> Workload:
    """The model's routing preset (a model), batched as the scenario's server would; with `prompts`, each
    sequence first processes sc.prompt_tokens of prompt in ubatches of sc.n_ubatch."""
    return batched_synthetic(model, sc, synthetic_trace(model, seed, n_tokens), prompts)


def synthetic_trace(model: ModelSpec, seed: int = 0, n_tokens: int = SYNTHETIC_TOKENS) -> TokenTrace:
    """The tokens' routing under the model's preset, before any batching: callers that batch it several ways
    (Explore, the recommender) can generate it once (and it is drawn once per install: moe_model.stored)."""
    preset = preset_for(model)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    return generate_stored(shape, preset.knobs, n_tokens, seed=seed, label=f"synthetic ({preset.name} preset)")


def batched_synthetic(model: ModelSpec, sc: Scenario, trace: TokenTrace, prompts: bool = False) -> Workload:
    """A synthetic trace batched as the scenario's server would (synthetic_workload's second half)."""
    prompt = sc.prompt_tokens if prompts else 0
    batching = server_batching(
        model.architecture, sc.build, **sc.request.batching_fields, prompt_tokens=prompt, ubatch_size=sc.n_ubatch
    )
    return build_workload(trace, batching, model.n_expert)


def workload_scenario(sc: Scenario, prompt_tokens: int = 0) -> Scenario:
    """What a batched synthetic workload reads of a scenario (streams, drafting, ubatch, the build's batching; each
    prompt's first `prompt_tokens` where > 0), the rest at their defaults: one key for every setting that replays
    the same workload (the app's caches, Explore's and the recommender's)."""
    fields = dict(sc.request.batching_fields)
    fields |= {"n_ubatch": sc.n_ubatch, "build": sc.build} | ({"prompt_tokens": prompt_tokens} if prompt_tokens else {})
    return Scenario(**fields)


def drafting(sc: Scenario) -> Batching:
    """How a server of `sc` batches a decode trace (streams and drafting, and the start-up seq_rm probe where its
    build makes it), for a trace or a routing fitted to logs."""
    return Batching(**sc.request.batching_fields, start_up_probe=start_up_probe(sc.build))


class SyntheticSource:
    """The model's routing preset as a workload source (a WorkloadFor): the trace generated once, batched once per
    way a server batches it (workload_scenario's key). Safe to share between threads (recommend's): the first
    caller of a key builds it, the others wait for it."""

    def __init__(self, model: ModelSpec) -> None:
        self.model, self._trace, self._batched, self._lock = model, None, {}, threading.Lock()

    def __call__(self, sc: Scenario) -> Workload:
        key = workload_scenario(sc)
        with self._lock:
            if key not in self._batched:
                self._trace = self._trace or synthetic_trace(self.model)
                self._batched[key] = batched_synthetic(self.model, key, self._trace)
            return self._batched[key]
