"""The recommender's cached calls (Explore's best setting and Shopping), in the shared store of ui.cached: its
workload with the counts replayed on it so far, each card's ranked options, and the replays the cards share. Each
takes the page's Scenario whole (ui.request), so every field of the request reaches the recommender, and runs on the
page-work threads (ui.background): the page shows its progress, and a session that leaves stops it."""

from __future__ import annotations

from collections.abc import Iterator

from moe_model.answers.recommend import Option, recommend, replay_shared, request_of
from moe_model.fits.calibration import TimeModel
from moe_model.pricing.curve import ReplayMemo
from moe_model.pricing.workloads import SYNTHETIC_TOKENS, drafting, workload_scenario
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.logged import LogRouting
from moe_model.routing.synthetic import PRESETS_PATH, preset_for
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Scenario
from moe_model.workload import Workload
from ui.background import awaited, keep_only, start
from ui.cached import app_cached, cached_batched_synthetic, file_key, replay_memo

BEST, CARDS = "explore:best", "shopping:"  # the page-work slots (ui.background) of Explore's pick, Shopping's cards
SHARED = f"{CARDS}shared"  # the replays Shopping's cards share


@app_cached("Generating routing...")
def recommend_memo(
    model: ModelSpec,
    batching: Scenario,
    presets_key: str,
    routing: LogRouting | None = None,
    work: Workload | None = None,
) -> ReplayMemo:
    """The recommender's workload (the synthetic preset `python -m moe_model recommend` uses, the routing fitted
    to the session's logs, or the user's trace `work`, batched as the request is) with the counts replayed on it so
    far: every card, context and page that recommends for it shares them, Explore's curve and answers too (the
    same workload, the same memo). `batching`: workload_scenario's."""
    if work is not None:
        return replay_memo(work)
    if routing is not None:
        return ReplayMemo(routing.workload(model, drafting(batching)))
    return replay_memo(cached_batched_synthetic(model, batching, False, SYNTHETIC_TOKENS, presets_key))  # Explore's


def _memo(model: ModelSpec, base: Scenario, routing: LogRouting | None, work: Workload | None) -> ReplayMemo:
    return recommend_memo(model, workload_scenario(base), file_key(PRESETS_PATH), routing, work)


def cached_recommend(
    model: ModelSpec,
    command_path: str,
    hw: Hardware,
    tm: TimeModel,
    base: Scenario,
    routing: LogRouting | None = None,
    work: Workload | None = None,
) -> list[Option]:
    """The one recommender for the page's request `base` (streams, drafting, context, prompt, depth, build, CPU
    share, load mode, ClassLRU's reading): the user's trace (`work`, batched as `base`; replayed: no routing
    spread) or the routing fitted to the session's logs where there is one. Computed once per request whichever
    placement the page shows (request_of), on a page-work thread (Explore's "best" slot) while its progress shows."""
    job = start(BEST, _cached_recommend, model, command_path, hw, tm, request_of(base), routing, work)
    return awaited(job, "Ranking every setting for this machine")


def no_best_setting() -> None:
    """Explore's best setting switched off: its work, if still running for this session alone, stops."""
    keep_only(BEST)


@app_cached("Ranking every setting...", kernels=True)
def _cached_recommend(
    model: ModelSpec,
    command_path: str,
    hw: Hardware,
    tm: TimeModel,
    request: Scenario,
    routing: LogRouting | None = None,
    work: Workload | None = None,
) -> list[Option]:
    ranges = tm.ranges((0.0, 0.0) if work is not None else (routing or preset_for(model)).spreads)
    return recommend(model, hw, tm.params, request, _memo(model, request, routing, work), command_path, ranges)


@app_cached("Replaying what these cards share...", kernels=True)
def _shared_replays(
    model: ModelSpec,
    hardware: tuple[Hardware, ...],
    request: Scenario,
    routing: LogRouting | None = None,
    work: Workload | None = None,
) -> bool:
    """The settings the cards share, replayed once into the recommender's memo (recommend.replay_shared); kept
    as a key so that a second session asking for the same cards waits for the first instead of replaying."""
    replay_shared(model, hardware, request, _memo(model, request, routing, work))
    return True


def cached_recommend_cards(
    model: ModelSpec,
    command_path: str,
    hardware: list[Hardware],
    tm: TimeModel | list[TimeModel],
    base: Scenario,
    routing: LogRouting | None = None,
    work: Workload | None = None,
    box=None,
) -> Iterator[list[Option]]:
    """Shopping: each card's options in turn for the page's request `base` (cached_recommend's, computed once per
    key whichever sessions ask) on the page-work threads, their progress drawn in `box`; the settings the cards not
    cached yet share are replayed first, once (the counts do not depend on the time model: `tm` may be one per card,
    the user's own machine with its own; ClassLRU's reading the logs picked is the build's, so every card replays
    it). A session that leaves the page, or changes the request or the cards, stops what it alone still wanted."""
    request = request_of(base)
    tms = list(tm) if isinstance(tm, list) else [tm] * len(hardware)
    calls = [(model, command_path, hw, t, request, routing, work) for hw, t in zip(hardware, tms, strict=True)]
    missing = tuple(hw for hw, call in zip(hardware, calls, strict=True) if not _cached_recommend.is_cached(*call))
    cards = {f"{CARDS}{i}": call for i, call in enumerate(calls)}
    shared = (model, missing, request, routing, work) if len(missing) > 1 else None
    wanted = {slot: _cached_recommend.key_of(*call) for slot, call in cards.items()}
    keep_only(CARDS, wanted | ({SHARED: _shared_replays.key_of(*shared)} if shared else {}))
    if shared:
        awaited(start(SHARED, _shared_replays, *shared), "Replaying what these cards share", box)
    for n, (slot, call) in enumerate(cards.items()):  # one at a time: other sessions' work is not queued behind them
        job = start(slot, _cached_recommend, *call)
        yield awaited(job, f"Ranking the {call[2].name}'s settings (card {n + 1} of {len(cards)})", box)
