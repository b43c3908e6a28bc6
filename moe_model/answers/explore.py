"""What the Explore page shows for one setting, computed here (the page lays it out; tests run it without a UI).

The budget curve (pricing/curve.py, with the cache's own statistics under the build's policy at every budget for
the hit-rate and upload charts) and its speeds, the no-cache lines, the answer at the chosen budget against the same
placement without a cache, the measured points to overlay, and the curve as a table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from moe_model.answers.verdict import CacheVerdict, cache_verdict
from moe_model.limits import MAX_ROUTING_DRAWS
from moe_model.llama.pool_rule import MAX_BATCH, too_large_for_pool
from moe_model.llama.simulate import SimResult
from moe_model.llama.slot_plan import Placement
from moe_model.policies.wording import hit_rate_wording
from moe_model.pricing.curve import BudgetAxis, Curve, CurvePoint, ReplayMemo, WorkloadFor, budget_axis, curve
from moe_model.pricing.workloads import SYNTHETIC_TOKENS
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import SEQ_LEN
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.range_inputs import NO_RANGE, RangeInputs
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import Prediction
from moe_model.workload import Workload

EXPLORE_TOKENS = SYNTHETIC_TOKENS  # the workload predict and recommend replay: one number per setting everywhere
NO_CACHE_LINES = (("--fit", "fit"), ("--cpu-moe", "cpu-moe"))  # the speed chart's reference lines


@dataclass(frozen=True, eq=False)
class ExploreCurve:
    """The curve of one setting, with what the charts draw beside it."""

    axis: BudgetAxis
    curve: Curve
    without: Prediction  # the same placement without a cache
    no_cache: dict[str, Prediction]  # --fit and --cpu-moe without a cache

    @property
    def simulated(self) -> list[SimResult]:
        return [p.simulated for p in self.curve.points]

    @property
    def speeds(self) -> list[float | None]:
        """Predicted decode t/s where the setting runs (Layout.runs: it starts, fits VRAM or is too close to call,
        and fits RAM or streams from disk: the headline's rule; a model)."""
        return [None if p is None else p.decode_tps for p in self._usable()]

    @property
    def ranges(self) -> list[tuple[float, float] | None]:
        return [None if p is None else p.decode_tps_range for p in self._usable()]

    def _usable(self) -> list[Prediction | None]:
        return [p if p.layout.runs else None for p in self.curve.predictions]

    def table(self) -> pd.DataFrame:
        """The curve as the page's CSV download: the cache's statistics at each budget with the policy that produced
        them (its name, exact or modelled, the build), and the predicted speed."""
        sims = self.simulated
        words = [hit_rate_wording(p.replayed.simulated_by, p.prediction.scenario.build) for p in self.curve.points]
        return pd.DataFrame(
            {
                "budget_mib": [r.budget_mib for r in sims],
                "starts": [r.starts for r in sims],
                "hit_rate_small": [r.small.hit_rate for r in sims],
                "hit_rate_large": [r.large.hit_rate for r in sims],
                "uploaded_mib_per_token": [r.uploaded_bytes_per_token() / 2**20 for r in sims],
                "hit_rate_policy": [w.policy for w in words],
                "hit_rate_is": [w.how for w in words],
                "build": [p.prediction.scenario.build for p in self.curve.points],
                "predicted_decode_tps": self.speeds,
            }
        )


def _workload_for(work: Workload | ReplayMemo) -> WorkloadFor:
    """A memo is its own WorkloadFor (its counts reused by another card, host or budget), a workload is wrapped."""
    return work if isinstance(work, ReplayMemo) else lambda _: work


def _no_cache(model, hw, params, sc: Scenario, work: Workload | ReplayMemo, ranges: RangeInputs) -> Prediction:
    return curve(model, hw, params, sc, [0], _workload_for(work), ranges).points[0].prediction


def explore_curve(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    work: Workload | ReplayMemo,
    axis: BudgetAxis | None = None,
    ranges: RangeInputs = NO_RANGE,
) -> ExploreCurve:
    """The setting's curve at the budgets budget_axis chooses (`axis`: already chosen for this base), and the
    same placement, --fit and --cpu-moe without a cache (those two without the routing's spread). `work`: a
    ReplayMemo reuses the counts another card, host or answer already replayed on the same workload."""
    axis = axis or budget_axis(model, hw, base)
    on_curve = curve(model, hw, params, base, axis.budgets, _workload_for(work), ranges, with_lru=True)
    settled = ranges.without_routing()
    no_cache = {
        name: _no_cache(model, hw, params, replace(base, placement=Placement.parse(flag)), work, settled)
        for name, flag in NO_CACHE_LINES
    }
    without = _no_cache(model, hw, params, base, work, ranges)
    return ExploreCurve(axis, on_curve, without, no_cache)


def explore_point(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    work: Workload | ReplayMemo,
    budget_mib: int,
    ranges: RangeInputs = NO_RANGE,
) -> CurvePoint:
    """One budget off the curve (a typed value between the slider's stops), replayed and priced the same way."""
    return curve(model, hw, params, base, [budget_mib], _workload_for(work), ranges, with_lru=True).points[0]


def explore_answer(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    work: Workload | ReplayMemo,
    budget_mib: int,
    ranges: RangeInputs = NO_RANGE,
) -> Answer:
    """The headline at one budget without the curve: the point and the same placement without a cache, each as
    explore_curve computes them (the page shows it while the curve is still replaying)."""
    point = explore_point(model, hw, params, base, work, budget_mib, ranges)
    return Answer(point, cache_verdict(point.prediction, _no_cache(model, hw, params, base, work, ranges)))


@dataclass(frozen=True, eq=False)
class Answer:
    """The headline at the chosen budget."""

    point: CurvePoint
    cache: CacheVerdict  # the cache against the same placement without it; "no cache" at budget 0

    @property
    def host(self) -> HostMemory:
        """The RAM account of the point's layout."""
        return self.point.layout.ram

    @property
    def runs(self) -> bool:
        """A speed is shown: the same rule as the chart's (Layout.runs)."""
        return self.point.layout.runs

    @property
    def verdict(self) -> str:
        return self.cache.word


def answer_at(view: ExploreCurve, point: CurvePoint) -> Answer:
    """The headline at one budget: the cache's verdict by the rule predict and recommend use."""
    return Answer(point, cache_verdict(point.prediction, view.without))


def measured_points(
    reference: pd.DataFrame,
    logged: pd.DataFrame | None,
    hw: Hardware,
    model: ModelSpec,
    concurrency: int,
    placement_flag: str,
) -> pd.DataFrame:
    """The measurements to overlay: the reference rows of this GPU, model, concurrency and placement flag
    (--cpu-moe, --n-cpu-moe, --fit) with a decode speed, and the runs of this model and concurrency from the
    user's logs (a run at another -np is drawn only beside predictions at its -np)."""
    measured = reference[
        (reference["gpu"] == hw.name)
        & (reference["model"] == model.name.split(" (")[0])
        & (reference["parallel"] == concurrency)
        & reference["decode_tps"].notna()
        & (reference["placement"] == placement_flag)
    ]
    if logged is not None and len(logged):
        mine = logged[(logged["model"] == model.name) & (logged["parallel"] == concurrency)]
        measured = pd.concat([measured, mine], ignore_index=True)
    return measured


def simulated_prompt_tokens(prompt_tokens: int, model: ModelSpec, n_tokens: int = EXPLORE_TOKENS) -> int:
    """Prompt tokens per synthetic sequence whose routing can be drawn within this tool's limit (warm-up included)."""
    n_seq = -(-n_tokens // SEQ_LEN)
    return min(prompt_tokens, (MAX_ROUTING_DRAWS // (model.n_layer * model.n_expert) - 2) // n_seq)


def prompt_routing_note(sc: Scenario) -> str:
    """Why simulating the prompts leaves the headline almost as it was, where it does: llama.cpp's pool rule
    (pool_rule.pool_need) sends a ubatch of more than MAX_BATCH tokens past the pool."""
    if not too_large_for_pool(sc.prompt_ubatch):
        return ""
    return (
        f"Prompt ubatches of {sc.prompt_ubatch:,} tokens (-ub) bypass the cache's pool but for their last layer "
        f"(llama.cpp's limit is {MAX_BATCH} tokens; docs/llamacpp-cache.md section 5), so simulating them moves the "
        f"decode hit rate and the speeds little or not at all; at -ub {MAX_BATCH} or less they would go through it."
    )


@dataclass(frozen=True)
class PromptEffect:
    """What simulating the prompts changes at one budget: the decode hit rate and speed replayed without the
    prompts' routing and with it (None where no cache runs or the setting does not run). The prompt speed and the
    first token are the time model's, from the prompt's size: the prompts' routing does not move them."""

    budget_mib: int
    prompt_tokens: int  # simulated per sequence
    hit_rate: tuple[float | None, float | None]  # without, with
    decode_tps: tuple[float | None, float | None]  # without, with
    note: str  # why they move little, where the pool rule says so

    def sentence(self, hit_tag: str = "", decode_tag: str = "") -> str:
        """'Simulating the first 512 prompt tokens of each sequence: at 10,000 MiB the hit rate ... .' with each
        figure's basis tag after it."""
        said = [
            f"the hit rate {_moved(self.hit_rate, 100, ' %', ' points')} {hit_tag}".rstrip()
            if None not in self.hit_rate
            else "no cache runs, so there is no hit rate",
        ]
        if None not in self.decode_tps:
            said.append(f"decode {_moved(self.decode_tps, 1, ' t/s', ' t/s')} {decode_tag}".rstrip())
        return (
            f"Simulating the first {self.prompt_tokens:,} prompt tokens of each sequence: at {self.budget_mib:,} MiB "
            f"{' and '.join(said)}; the prompt speed and first token do not depend on it. {self.note}"
        ).strip()


def _moved(pair: tuple[float, float], scale: float, unit: str, delta_unit: str) -> str:
    """'is 96.90 % with them, 96.90 % without (within 0.01 points)' or '(-0.30 points)'."""
    without, with_prompts = (scale * v for v in pair)
    delta = with_prompts - without
    moved = f"within 0.01{delta_unit}" if abs(delta) < 0.005 else f"{delta:+.2f}{delta_unit}"
    return f"is {with_prompts:.2f}{unit} with them, {without:.2f}{unit} without ({moved})"


def prompt_effect(without: Answer, with_prompts: Answer, prompt_tokens: int) -> PromptEffect:
    """The headline at one budget without and with the prompts' routing replayed (two explore_answer of the same
    routing, batched without and with the first `prompt_tokens` of each prompt)."""
    before, after = without.point.prediction, with_prompts.point.prediction

    def decode(answer: Answer, pred: Prediction) -> float | None:
        return pred.decode_tps if answer.runs and pred.starts else None

    return PromptEffect(
        with_prompts.point.budget_mib,
        prompt_tokens,
        (before.hit_rate, after.hit_rate),
        (decode(without, before), decode(with_prompts, after)),
        prompt_routing_note(after.scenario),
    )


def fitting_no_cache(view: ExploreCurve) -> dict[str, Prediction]:
    """The no-cache lines that run (Layout.runs, the rule of the curve's points): a baseline that cannot is not
    drawn."""
    return {name: p for name, p in view.no_cache.items() if p.layout.runs}
