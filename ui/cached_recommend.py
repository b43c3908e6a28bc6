"""The recommender's cached calls (Explore's best setting and Shopping), in the shared store of ui.cached: its
workload with the counts replayed on it so far, each card's ranked options, and the replays the cards share."""

from __future__ import annotations

from collections.abc import Iterator

from moe_model.answers.curve import ReplayMemo
from moe_model.answers.recommend import Option, recommend, replay_shared
from moe_model.fits.calibration import TimeModel
from moe_model.fits.points import SYNTHETIC_TOKENS, batched_synthetic
from moe_model.limits import DEFAULT_PROMPT_TOKENS
from moe_model.llama.builds import MAINLINE_BUILD
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.logged import LogRouting
from moe_model.routing.synthetic import PRESETS_PATH, preset_for
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching, Workload
from ui.cached import app_cached, file_key, synthetic_tokens


@app_cached("Generating routing...")
def recommend_memo(
    model: ModelSpec,
    concurrency: int,
    presets_key: str,
    routing: LogRouting | None = None,
    work: Workload | None = None,
) -> ReplayMemo:
    """The recommender's workload (the synthetic preset `python -m moe_model recommend` uses, the routing fitted
    to the session's logs, or the user's trace `work` batched at `concurrency`: the same workload Explore replays)
    with the counts replayed on it so far: every card, context and page that recommends for it shares them."""
    base = Scenario(concurrency=concurrency)
    if work is not None:
        return ReplayMemo(work)
    if routing is not None:
        return ReplayMemo(routing.workload(model, Batching(concurrency, base.draft_tokens, base.accept_rate)))
    return ReplayMemo(batched_synthetic(model, base, synthetic_tokens(model, SYNTHETIC_TOKENS, presets_key)))


@app_cached("Ranking every setting...", kernels=True)
def cached_recommend(
    model: ModelSpec,
    command_path: str,
    hw: Hardware,
    tm: TimeModel,
    concurrency: int,
    n_ctx: int,
    routing: LogRouting | None = None,
    build: int = MAINLINE_BUILD,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    depth: int | None = None,
    policy_reading: tuple[tuple[str, str], ...] = (),
    work: Workload | None = None,
) -> list[Option]:
    """The one recommender with the inputs every page and the CLI share: concurrency, context, build, the prompt and
    the context depth; the user's trace (`work`, replayed: no routing spread) or the routing fitted to the session's
    logs where there is one, and ClassLRU's reading they picked (replayed alone: no band)."""
    memo = recommend_memo(model, concurrency, file_key(PRESETS_PATH), routing, work)
    base = Scenario(
        concurrency=concurrency, n_ctx=n_ctx, build=build, prompt_tokens=prompt_tokens, depth=depth,
        policy_reading=policy_reading,
    )  # fmt: skip
    spread, miss = (0.0, 0.0) if work is not None else (routing or preset_for(model)).spreads
    return recommend(model, hw, tm.params, base, memo, command_path, tm.rel_error, spread, miss_spread=miss)


@app_cached("Replaying what these cards share...", kernels=True)
def _shared_replays(
    model: ModelSpec,
    hardware: tuple[Hardware, ...],
    concurrency: int,
    n_ctx: int,
    routing: LogRouting | None = None,
    build: int = MAINLINE_BUILD,
    policy_reading: tuple[tuple[str, str], ...] = (),
    work: Workload | None = None,
) -> bool:
    """The settings the cards share, replayed once into the recommender's memo (recommend.replay_shared); kept
    as a key so that a second session asking for the same cards waits for the first instead of replaying."""
    memo = recommend_memo(model, concurrency, file_key(PRESETS_PATH), routing, work)
    shared = Scenario(concurrency=concurrency, n_ctx=n_ctx, build=build, policy_reading=policy_reading)
    replay_shared(model, hardware, shared, memo)
    return True


def cached_recommend_cards(
    model: ModelSpec,
    command_path: str,
    hardware: list[Hardware],
    tm: TimeModel | list[TimeModel],
    concurrency: int,
    n_ctx: int,
    routing: LogRouting | None = None,
    build: int = MAINLINE_BUILD,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    depth: int | None = None,
    policy_reading: tuple[tuple[str, str], ...] = (),
    work: Workload | None = None,
) -> Iterator[list[Option]]:
    """Shopping: each card's options in turn (cached_recommend's, computed once per key whichever sessions ask);
    the settings the cards not cached yet share are replayed first, once (the counts do not depend on the time
    model: `tm` may be one per card, the user's own machine with its own; ClassLRU's reading the logs picked is
    the build's, so every card replays it)."""
    tms = list(tm) if isinstance(tm, list) else [tm] * len(hardware)
    calls = [
        (model, command_path, hw, t, concurrency, n_ctx, routing, build, prompt_tokens, depth, policy_reading, work)
        for hw, t in zip(hardware, tms, strict=True)
    ]
    missing = tuple(hw for hw, call in zip(hardware, calls, strict=True) if not cached_recommend.is_cached(*call))
    if len(missing) > 1:
        _shared_replays(model, missing, concurrency, n_ctx, routing, build, policy_reading, work)
    for call in calls:
        yield cached_recommend(*call)
