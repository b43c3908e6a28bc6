"""Explore: drag the budget and the server settings; see hit rates, uploads, speed and where time goes.

Layout only: every number comes from moe_model.answers.explore (the curve, the answer at a budget, the measured
points), speed.curve (its budgets) and speed.policy_compare, through the caches in ui.cached; the headline first,
then the curve and the policy comparison from page-work threads (ui.background)."""

from functools import partial

import streamlit as st

from moe_model.answers.basis import CALIBRATED, LOGS, MEASURED, MODELLED, SYNTHETIC, TRACE, Basis, prediction_basis
from moe_model.answers.explore import (
    Answer,
    ExploreCurve,
    fitting_no_cache,
    measured_points,
    prompt_effect,
    simulated_prompt_tokens,
)
from moe_model.answers.fit_advice import recommend_advice, would_fit
from moe_model.answers.headline import headline_figures
from moe_model.answers.policy_compare import hit_rate_bases
from moe_model.answers.usability import usability
from moe_model.charts import (
    hit_rate_curve,
    layer_hit_rates,
    overlay_logged_hits,
    policy_curves,
    shade_unfit,
    speed_curve,
    time_breakdown,
    upload_curve,
    with_basis,
)
from moe_model.fits.log_timings import load_reference
from moe_model.llama.builds import CLASS_LRU_BUILD, CPU_SHARE_BUILD, FIRST_CACHE_BUILD, has_cpu_share
from moe_model.policies import REFERENCE, available_at
from moe_model.policies.wording import hit_rate_wording
from moe_model.pricing.curve import BudgetAxis, budget_axis
from moe_model.routing.synthetic import preset_for
from moe_model.speed.scenario import Scenario
from moe_model.speed.streams import speed_label
from ui.background import awaited, keep_only, start
from ui.badges import badge
from ui.cached import (
    Inputs,
    bundled_traces,
    cached_explore_answer,
    cached_explore_curve,
    cached_log_workload,
    cached_policy_comparison,
    cached_synthetic,
    routing_key,
    trace_workload,
    workload_npz,
)
from ui.cached_recommend import cached_recommend, no_best_setting
from ui.headline import (
    best_details,
    details,
    metric_cards,
    nearest_caption,
    usability_box,
)
from ui.host_run import sidebar_host_run, time_model_with, with_host_run
from ui.request import app_scenario
from ui.reused import reused
from ui.session_logs import log_routing
from ui.sidebar import (
    apply_setting,
    policy_caption,
    sidebar_build,
    sidebar_calibrated,
    sidebar_hardware,
    sidebar_model,
    sidebar_placement,
    sidebar_serving,
)
from ui.startup import through_app
from ui.state import SCENARIO, keep, kept, kept_toggle
from ui.text import chart_literal, literal
from ui.uploads import trace_upload
from ui.widgets import (
    budget_slider,
    control,
    fit_verdicts,
    friendly_errors,
    model_flag_path,
    range_chart,
    runnable,
)

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

st.header("Explore")
intro = st.empty()  # filled once the sidebar has chosen the build: its words depend on the policy it runs
cards = st.container()  # the headline's figures, across the page above the controls, filled once they are known


def best_setting(inputs: Inputs, source: str, model_key: str, base, routing, replays_trace: bool, basis: Basis) -> None:
    """The recommender's pick for this machine at the page's request `base` (its drafting too), with the inputs
    Shopping and `recommend` use (the user's trace replayed where Explore replays one); one click applies it."""
    if not kept_toggle(st, "best setting for this machine (the recommender Shopping and the CLI use)", "best", False):
        no_best_setting()  # switched off while it was still ranking: that work stops
        return
    model, hw, time_model, path = inputs.model, inputs.hw, inputs.tm, model_flag_path(source, model_key)
    options = cached_recommend(model, path, hw, time_model, base, routing, inputs.work if replays_trace else None)
    best = options[0] if options else None
    if best is None or not best.usable:
        advice, tag = recommend_advice(model, hw, options), badge(MODELLED)  # the memory accounts are the model's
        st.error(f"{tag} {advice.summary}")
        if advice.would_fit:
            st.info("**What would fit**:\n" + "\n".join(f"- {c.text} {tag}" for c in advice.would_fit))
        return
    p = best.prediction
    figures = headline_figures(p, basis, time_model.prefill_rel_error)
    usability_box(st, best_details(best.label, p, figures, best.cache.sentence, basis), usability(p), basis.decode)
    nearest_caption(st, model.name, p, hw)
    range_chart(p, "best_range", basis.decode)
    st.button("apply this setting", key="apply_best", on_click=apply_setting, args=(p.scenario,))
    st.code(runnable(best.command, source), language="bash", wrap_lines=True)
    if p.scenario.pinned:
        st.caption(
            "Pinned host memory (--load-mode none) won: pinned uploads are faster, the CPU path over pinned "
            "memory can be slower, and pinning needs the RAM (the host experts must fit in it)."
        )


LOGS_ROUTING = "synthetic (fitted to your logs)"
PRESET_ROUTING = "synthetic (fitted preset)"


def workload(model, model_key: str, base, routing):
    """The routing to replay (fitted to the session's logs, the fitted synthetic preset, a bundled real trace or
    an upload) batched as the request `base` is, its cache key, the trace (a bundled path or an upload's
    (bytes, name)) where it is one, and where the prompts are simulated (prompt tokens per sequence, the same
    routing without them) for prompts_caption; else None."""
    simulate_prompts = kept_toggle(st, "simulate prompts too", "sim_prompts", False)  # a short label: a narrow column
    traces = bundled_traces(model)
    kinds = [*([LOGS_ROUTING] if routing else []), PRESET_ROUTING, *traces, "upload a trace"]
    kind = st.radio("workload", kinds, kinds.index(kept("workload", kinds[0], choices=kinds[:-1])), key="workload")
    if kind != kinds[-1]:  # an upload cannot travel in a link
        keep(workload=kind)
    batching = f"{base.concurrency}:{base.draft_tokens}:{base.accept_rate}"
    if kind == LOGS_ROUTING:
        st.caption(
            f"{badge(CALIBRATED)} Routing {routing.describe()} (a model of your routing; prompts not simulated)."
        )
        work = cached_log_workload(model, routing, base)
        return work, f"logs:{routing_key(routing)}:{batching}", None, None
    upload = trace_upload() if kind == kinds[-1] else None
    if upload is not None:
        st.caption(f"Your trace {literal(upload.name)}: its routing replayed (no routing spread in the range).")
        trace = (upload.data, upload.name)
        return trace_workload(trace, model.n_expert, base), f"upload:{upload.digest}:{batching}", trace, None
    if kind in traces:
        work = trace_workload(traces[kind], model.n_expert, base)
        return work, f"bundled:{kind}:{batching}", traces[kind], None
    prompt = base.prompt_tokens
    sim_prompt = simulated_prompt_tokens(prompt, model) if simulate_prompts else 0
    work = cached_synthetic(model, base, sim_prompt)
    if sim_prompt < prompt and simulate_prompts:
        st.caption(
            f"Prompt routing is simulated for the first {sim_prompt:,} tokens of each prompt "
            "(this tool's limit on drawn prompt routing)."
        )
    preset = preset_for(model)
    st.caption(
        f"{badge(MODELLED)} Synthetic routing is a model: the {preset.name} preset ({preset.match}), fitted to "
        f"{preset.fitted_to}; ±{preset.spread_points:.1f} hit-rate points."
    )
    without = (sim_prompt, cached_synthetic(model, base)) if sim_prompt else None
    return work, f"synthetic:{model_key}:{batching}:{sim_prompt}", None, without


def prompts_caption(inputs: Inputs, prompts, base: Scenario, ranges, answer: Answer, basis: Basis) -> None:
    """What simulating the prompts changed at the chosen budget (the answer to that toggle): the same budget
    replayed on the routing without them (the answer before the toggle, kept) beside the headline's."""
    prompt_tokens, without = prompts
    before = cached_explore_answer(
        Inputs(inputs.model, without, inputs.hw, inputs.tm), base, ranges, answer.point.budget_mib
    )
    effect = prompt_effect(before, answer, prompt_tokens)
    st.caption(effect.sentence(badge(basis.hit_rate), badge(basis.decode)))


def headline(answer: Answer, advice, inputs: Inputs, basis: Basis, spread_points: float) -> None:
    """The answer at the chosen budget, first: its four figures as cards and whether it is usable (what would
    help, when not), whether it starts and fits (what would, when not), then the details and the nearest
    measurement."""
    budget, pred, prefill_error = answer.point.budget_mib, answer.point.prediction, inputs.tm.prefill_rel_error
    runs = pred.starts and answer.runs
    figures = headline_figures(pred, basis, prefill_error, spread_points) if runs else ()  # the cards' and details'
    if runs:
        metric_cards(cards, figures)
        usability_box(st, "", usability(pred), basis.decode)
    fit_verdicts(pred.vram, answer.host, advice)
    if not pred.starts:
        st.error(f"{badge(MODELLED)} At {budget:,} MiB llama-server would not start: {pred.error}")
    elif runs:
        st.markdown(details(pred, figures, answer.cache.sentence, basis))
        nearest_caption(st, inputs.model.name, pred, inputs.hw)
        range_chart(pred, "range", basis.decode)
    else:
        st.markdown(f"**At {budget:,} MiB**: does not fit, so no speed is shown.")


def curve_figures(view: ExploreCurve, answer: Answer, measured, budget: int, placement_name: str, baselines, routing,
                  basis: Basis) -> dict:  # fmt: skip
    """The curves against budget and the breakdown at the chosen one, each chart's subtitle led by how its numbers
    are known (`basis`; the diamonds and the logs' points measured)."""
    axis, point, hits_basis = view.axis, answer.point, basis.hit_rate
    lines = {f"{n}, no cache": p.decode_tps for n, p in baselines.items()}
    concurrency = point.prediction.scenario.concurrency
    speed = speed_curve(axis.budgets, view.speeds, lines, measured, budget, view.ranges, concurrency)
    drawn = measured is not None and len(measured) > 0
    speed = with_basis(speed, basis.decode, *([(MEASURED, "diamonds")] if drawn else []))
    hits, uploads = hit_rate_curve(view.simulated, budget), upload_curve(view.simulated, budget)
    if routing is not None:
        hits = overlay_logged_hits(hits, routing, point.layout.placement)
    hits = with_basis(hits, hits_basis, *([(MEASURED, "your logs' points")] if routing is not None else []))
    uploads = with_basis(uploads, hits_basis)  # the replay's misses, known as its hit rates are
    compare = {**baselines, f"{placement_name} + {point.budget_mib:,} MiB": point.prediction}
    breakdown = time_breakdown({k: v for k, v in compare.items() if v.starts})
    fits_mib, end_mib = axis.fits_mib, axis.budgets[-1]
    return {
        "speed": shade_unfit(speed, fits_mib, end_mib),
        "hits": shade_unfit(hits, fits_mib, end_mib),
        "uploads": shade_unfit(uploads, fits_mib, end_mib),
        "layers": with_basis(layer_hit_rates(point.simulated), hits_basis),
        "breakdown": with_basis(breakdown, basis.decode),
    }


def curve_charts(view: ExploreCurve, answer: Answer, measured, budget: int, placement_name: str, baselines, routing,
                 basis: Basis):  # fmt: skip
    """curve_figures drawn (those of the last run where it had the same inputs), then the prediction's notes, each
    badged."""
    inputs = (view, answer, measured, budget, placement_name, routing, basis)  # baselines: view's
    build = partial(curve_figures, view, answer, measured, budget, placement_name, baselines, routing, basis)
    figs = reused("explore:charts", inputs, build)
    st.plotly_chart(figs["speed"], width="stretch", key="speed")
    a, b = st.columns(2)
    a.plotly_chart(figs["hits"], width="stretch", key="hits")
    b.plotly_chart(figs["uploads"], width="stretch", key="uploads")
    a.plotly_chart(figs["layers"], width="stretch", key="layers")
    st.plotly_chart(figs["breakdown"], width="stretch", key="breakdown")
    for note in answer.point.prediction.notes:  # the memory accounts, the disk term, a modelled policy: the model's
        st.caption(f"{badge(MODELLED)} {note}")


def policy_choice(base: Scenario) -> tuple[str, ...]:
    """The policy comparison's controls: the policies chosen, empty unless "compare them" is on."""
    st.subheader("Replacement policies on this workload")
    offered = available_at(base.build)  # the CPU share's policy from b12191, as its flag
    names = st.multiselect("policies", offered, offered, key="policies")
    tags = [hit_rate_wording(name, base.build, base.cpu_share).tag for name in names if name != REFERENCE]
    st.caption(
        f"The reference: {hit_rate_wording(REFERENCE, base.build, base.cpu_share).tag}, "
        f"b{FIRST_CACHE_BUILD}-b{CLASS_LRU_BUILD - 1}'s LRU; "
        + (f"beside it {', '.join(tags)} (see docs/models-and-fits.md). " if tags else "")
        + "Belady's optimum is the upper bound no policy can pass."
    )
    if not names or not kept_toggle(st, "compare them (runs each policy at every budget)", "compare_policies", False):
        return ()
    return tuple(names)


def policies_at_budget(inputs: Inputs, base: Scenario, budget: int, names: tuple[str, ...]):
    """The comparison's first answer, each policy at the page's budget, from a page-work thread."""
    return start("explore:policies_at", cached_policy_comparison, inputs, base, (budget,), names)


def policy_table(inputs: Inputs, base: Scenario, budget: int, names: tuple[str, ...], routing: str, basis: Basis):
    """The chosen policies at the page's budget (a table) from a page-work thread, every figure with its basis badge
    (the hit rates' per policy replaying `routing`, the speeds' as the headline's)."""
    at_budget = awaited(policies_at_budget(inputs, base, budget, names), f"Replaying each policy at {budget:,} MiB")
    rows = [
        f"| {r.policy} | {_percent(r.hit_rate)} {badge(r.hit_basis)} | {_tps(r.decode_tps)} {badge(basis.decode)} |"
        for r in at_budget.at(budget, base, routing)
    ]
    decode = speed_label(f"decode at {budget:,} MiB", base.concurrency)
    head = f"| policy | hit rate at {budget:,} MiB (every lookup, as the chart below draws it) | {decode} |"
    st.markdown("\n".join([head, "|---|---|---|", *rows]))


def policy_comparison(
    inputs: Inputs, base: Scenario, axis: BudgetAxis, budget: int, names: tuple[str, ...], routing: str, basis: Basis
):
    """The chosen policies' curves (below their table, policy_table) from a page-work thread, badged as the table."""
    job = start("explore:policies", cached_policy_comparison, inputs, base, axis.policy_budgets(), names)
    comparison = awaited(job, "Replaying the workload with every policy at every budget")
    labels = comparison.labels()
    p1, p2 = st.columns(2)
    p1.plotly_chart(
        policy_curves(comparison.budgets, comparison.hit_rates(), labels, REFERENCE, mark_budget=budget),
        width="stretch",
        key="policy_hits",
    )
    p2.plotly_chart(
        policy_curves(
            comparison.budgets,
            comparison.decode_tps,
            labels,
            REFERENCE,
            speed_label("predicted decode t/s", base.concurrency),
            budget,
        ),
        width="stretch",
        key="policy_tps",
    )
    bases = hit_rate_bases(names, base, routing)
    st.caption(
        f"First {comparison.n_ubatches:,} ubatches of the workload, each budget at the placement llama.cpp would "
        "resolve for it. Hit rates: "
        + "; ".join(f"{badge(word)} {', '.join(policies)}" for word, policies in bases.items())
        + f". t/s {badge(basis.decode)}: the time model (a model, not a measurement), each policy's counts priced "
        "as `predict --policy NAME` prices them."
    )


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f} %"


def _tps(tps: float | None) -> str:
    return "does not start or fit" if tps is None else f"{tps:.1f} t/s"


with friendly_errors():
    model, source, model_key = sidebar_model()
    hw, time_model, load_mode = sidebar_hardware()
    host_run = sidebar_host_run()
    hw = with_host_run(hw, model, host_run)  # the host side calibrated from the user's CPU run, where given
    time_model = time_model_with(time_model, host_run, sidebar_calibrated())
    serving = sidebar_serving(prompt=True)
    placement_name, placement = sidebar_placement(model)
    build = sidebar_build()
    routing = log_routing(model, hw, build)
    controls, charts = st.columns([1, 3])
    with controls:
        draft, accept = control(st, SCENARIO["draft_tokens"]), control(st, SCENARIO["accept_rate"])
        share = control(st, SCENARIO["cpu_share"])
        if share and not has_cpu_share(build):
            share = 0.0
            st.caption(f"b{build} has no --moe-cache-cpu-share (it came in b{CPU_SHARE_BUILD}): not applied.")
        base = app_scenario(serving, build, placement, load_mode, share, draft_tokens=draft, accept_rate=accept)
        work, work_key, trace, prompts = workload(model, model_key, base, routing)
    from_logs = work_key.startswith("logs:")
    intro.caption(
        f"{base.hit_rate_wording.sentence}; speeds come from a calibrated time model (a model, not a measurement); "
        "diamonds are measurements."
    )
    axis = budget_axis(model, hw, base)
    with controls:
        budget = budget_slider(st, axis.top_mib, step=axis.step_mib)
        if not axis.cache_fits:
            st.caption("No cache fits beside this placement: free VRAM with more layers in host memory.")
        show_measured = kept_toggle(st, "show measured points", "measured", True)  # the speed chart's diamonds
    inputs = Inputs(model, work, hw, time_model)
    spreads = (0.0, 0.0) if trace is not None else (routing if from_logs else preset_for(model)).spreads
    ranges = time_model.ranges(spreads)  # a replayed trace: no routing spread
    routing_kind = TRACE if trace is not None else LOGS if from_logs else SYNTHETIC
    basis = prediction_basis(
        routing_kind, base, hw,
        machine_calibrated=sidebar_calibrated(), rel_error=time_model.rel_error,
        prefill_rel_error=time_model.prefill_rel_error,
    )  # fmt: skip
    curve_key = {"explore:curve": cached_explore_curve.key_of(inputs, base, ranges, axis)}
    keep_only("explore:curve", curve_key)  # a curve this run will not draw (an earlier -np) stops before the answer
    answer = cached_explore_answer(inputs, base, ranges, budget)  # first: the curve's replay must not delay it
    with charts:
        with st.container():  # drawn before the charts, so that it is the first thing a change updates
            fits = answer.point.prediction.usable and answer.host.fits
            advice = () if fits else would_fit(model, hw, answer.point.prediction.scenario)
            headline(answer, advice, inputs, basis, spreads[0])
            if prompts is not None:
                prompts_caption(inputs, prompts, base, ranges, answer, basis)
            # once the answers are sent: on two cores the curve's replay slowed their drawing
            curve_job = start("explore:curve", cached_explore_curve, inputs, base, ranges, axis)
            st.caption(policy_caption(base))
            st.caption(
                basis.tagged_line(badge) + (f" {badge(MEASURED)} Host: {host_run.described}." if host_run else "")
            )
            best_setting(inputs, source, model_key, base, routing if from_logs else None, trace is not None, basis)
        curve_area = st.container()  # drawn into after the policies' table below where the curve is known
    downloads = st.container()
    names = policy_choice(base)
    table_area = st.container()  # the policies at the budget, below their controls
    table_first = bool(names) and curve_job.future.done()
    if table_first:  # a known curve: its charts are the last run's, the answer to "compare them" comes before them
        with table_area:
            policy_table(inputs, base, budget, names, routing_kind, basis)
    with curve_area:
        logged = st.session_state.get("measured_points")  # the diamonds: after the headline, with the charts
        measured = (
            measured_points(load_reference(), logged, hw, model, base.concurrency, placement_name.split()[0])
            if show_measured
            else None
        )
        view = awaited(curve_job, "Simulating the cache at every budget")
        baselines = fitting_no_cache(view)
        fitted = routing if from_logs else None  # the routing fitted to the logs, where it is replayed
        curve_charts(view, answer, chart_literal(measured), budget, placement_name, baselines, fitted, basis)
        st.caption(
            f"{badge(basis.decode)} Time model parameters: {time_model.source}. Routing: "
            + (
                routing.describe()
                if from_logs
                else "your trace, replayed"
                if trace is not None
                else f"the {preset_for(model).name} preset (a model)"
            )
            + ". Residuals: the Reference page."
            + ("" if len(baselines) == len(view.no_cache) else " No-cache lines that do not fit are not drawn.")
        )
    d1, d2 = downloads.columns(2)
    d1.download_button(
        "curve as CSV", view.table().to_csv(index=False), file_name="moe-cache-curve.csv", key="dl_curve"
    )
    d2.download_button(
        "workload as NPZ (replay it with `simulate --trace`)",
        workload_npz(work, work_key),
        file_name="workload.npz",
        key="dl_work",
    )
    if names and not table_first:
        with table_area:
            policy_table(inputs, base, budget, names, routing_kind, basis)
    if names:
        policy_comparison(inputs, base, axis, budget, names, routing_kind, basis)
