"""Explore: drag the budget and the server settings; see hit rates, uploads, speed and where time goes."""

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from moe_model.charts import (
    hit_rate_curve,
    layer_hit_rates,
    policy_curves,
    shade_unfit,
    speed_curve,
    time_breakdown,
    upload_curve,
)
from moe_model.llama.slot_plan import Placement, full_budget_mib, min_budget_mib
from moe_model.policies import POLICIES, REFERENCE
from moe_model.routing.synthetic import preset_for
from moe_model.speed.host_memory import host_memory
from moe_model.speed.measurements import load_reference
from moe_model.speed.policy_compare import predicted_tps
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.time_model import predict, predict_curve, verdict
from moe_model.speed.traffic import decode_ubatches
from moe_model.speed.vram import max_budget_mib
from ui.common import (
    budget_slider,
    bundled_traces,
    cached_bundled_trace,
    cached_policy_comparison,
    cached_policy_traffic,
    cached_recommend,
    cached_scenario_curve,
    cached_synthetic,
    cached_trace,
    content_key,
    fit_verdicts,
    friendly_errors,
    keep,
    kept,
    model_flag_path,
    sidebar_hardware,
    sidebar_model,
    sidebar_placement,
    sidebar_serving,
    simulated_prompt_tokens,
    workload_npz,
)

N_CURVE = 24
N_SLIDER_STEPS = 40  # the budget slider's stops; the number box takes any value
N_POLICY_BUDGETS = 8
MAX_POLICY_UBATCHES = 5000  # bounds the per-budget policy runs (seconds each on the real GPT-OSS trace)

st.header("Explore")
st.caption(
    "Hit rates are simulated exactly as llama.cpp's cache would serve the workload; speeds come from a "
    "calibrated time model (a model, not a measurement); diamonds are measurements."
)


def best_setting(model, source: str, model_key: str, hw, time_model, concurrency: int, n_ctx: int) -> None:
    """The recommender's pick for this machine, with the inputs Shopping and `recommend` use."""
    if not st.toggle("best setting for this machine (the recommender Shopping and the CLI use)", key="best"):
        return
    options = cached_recommend(
        model,
        model_key,
        model_flag_path(source, model_key),
        hw,
        repr(hw),
        time_model,
        repr(time_model),
        concurrency,
        n_ctx,
    )
    best = options[0] if options else None
    if best is None or not best.usable:
        st.error("No setting fits this machine's VRAM and RAM: " + (best.host.verdict if best else "nothing to try"))
        return
    p = best.prediction
    lo, hi = p.decode_tps_range
    st.success(
        f"**Best setting: {best.label}**: {p.decode_tps:.1f} t/s decode (range {lo:.1f}–{hi:.1f}, a model); "
        f"the cache {best.verdict}."
    )
    st.code(best.command, language="bash")
    if p.scenario.pinned:
        st.caption(
            "Pinned host memory (--load-mode none) won: pinned uploads are faster, the CPU path over pinned "
            "memory can be slower, and pinning needs the RAM (the host experts must fit in it)."
        )


with friendly_errors():
    model, source, model_key = sidebar_model()
    hw, time_model, load_mode = sidebar_hardware()
    params, params_source = time_model.params, time_model.source
    n_ctx, concurrency = sidebar_serving()
    placement_name, placement = sidebar_placement(model)
    controls, charts = st.columns([1, 3])
    with controls:
        draft = st.slider("draft tokens (speculative)", 0, 8, kept("draft", 0, int, 0, 8), key="draft")
        accept = st.slider("draft acceptance", 0.0, 1.0, kept("accept", 0.7, float, 0.0, 1.0), 0.05, key="accept")
        share = st.select_slider(
            "--moe-cache-cpu-share (b12191, a modelled policy)",
            [0.0, 0.5, 0.8, 0.9, 0.95],
            kept("share", 0.0, float, choices=[0.0, 0.5, 0.8, 0.9, 0.95]),
            key="share",
        )
        prompt = st.number_input(
            "prompt tokens per request", 1, 131072, kept("prompt", 512, int, 1, 131072), 64, key="prompt"
        )
        simulate_prompts = st.toggle("simulate prompt ubatches too (synthetic routing)", False, key="sim_prompts")
        traces = bundled_traces(model)
        kinds = ["synthetic (fitted preset)", *traces, "upload a trace"]
        workload_kind = st.radio(
            "workload", kinds, kinds.index(kept("workload", kinds[0], choices=kinds[:-1])), key="workload"
        )
        if workload_kind != kinds[-1]:  # an upload cannot travel in a link
            keep(workload=workload_kind)
        upload = (
            st.file_uploader("trace (.npz or .csv)", key="trace_upload") if workload_kind == "upload a trace" else None
        )
    base = Scenario(
        placement, 0, concurrency, draft, accept, share, n_ctx, prompt_tokens=int(prompt), load_mode=load_mode
    )
    routing = preset_for(model)
    spread = routing.spread_points
    if upload is not None:
        work = cached_trace(upload.getvalue(), upload.name, model.n_expert, concurrency, draft, accept)
        work_key = f"upload:{content_key(upload.getvalue())}:{concurrency}:{draft}:{accept}"
    elif workload_kind in traces:
        work = cached_bundled_trace(traces[workload_kind], model.n_expert, concurrency, draft, accept)
        work_key = f"bundled:{workload_kind}:{concurrency}:{draft}:{accept}"
    else:
        sim_prompt = simulated_prompt_tokens(int(prompt), model) if simulate_prompts else 0
        work = cached_synthetic(model, concurrency, draft, accept, sim_prompt)
        work_key = f"synthetic:{model_key}:{concurrency}:{draft}:{accept}:{sim_prompt}"
        with controls:
            if sim_prompt < int(prompt) and simulate_prompts:
                st.caption(
                    f"Prompt routing is simulated for the first {sim_prompt:,} tokens of each prompt "
                    "(this tool's limit on drawn prompt routing)."
                )
            st.caption(
                f"Synthetic routing is a model: the {routing.name} preset ({routing.match}), fitted to "
                f"{routing.fitted_to}; ±{routing.spread_points:.1f} hit-rate points."
            )
    layout0 = resolve(model, hw, base)  # with --fit: the layers it leaves in RAM without a cache
    lowest = min_budget_mib(model, layout0.placement) or 1
    full = full_budget_mib(model, layout0.placement) or 1
    fits = max_budget_mib(model, hw, layout0.placement, base.n_ctx, kv_types=base.kv_types)
    top = max(min(full, fits), 1) if fits >= lowest else max(full, 1)  # the slider ends where the cache stops fitting
    step = max(1, -(-top // N_SLIDER_STEPS))  # slider stops the curve below simulates: a drag needs no new run
    with controls:
        budget = budget_slider(st, top, step=step)
        if fits < lowest:
            st.caption("No cache fits beside this placement: free VRAM with more layers in host memory.")
    keep(prompt=int(prompt), draft=draft, accept=accept, share=share)
    hw_key = repr(hw)
    stops = range(0, top + 1, step)
    spread_out = np.linspace(lowest, max(full, lowest), N_CURVE).astype(int).tolist()
    budgets = tuple(sorted({*spread_out, *(b for b in stops if b >= lowest)}))
    results = cached_scenario_curve(model, model_key, work, work_key, hw, hw_key, base, budgets)
    on_curve = {r.budget_mib: r for r in results}
    current = (
        on_curve.get(budget) or cached_scenario_curve(model, model_key, work, work_key, hw, hw_key, base, (budget,))[0]
    )
    n_ub = decode_ubatches(work)

    def policy_traffic(sc):
        return cached_policy_traffic(model, model_key, work, work_key, hw, hw_key, sc)

    rel = time_model.rel_error
    preds = predict_curve(model, hw, params, base, results, n_ub, policy_traffic, rel, spread)
    ram_ok = host_memory(model, hw, layout0.placement, load_mode).fits  # no speeds drawn for a host that cannot hold it
    speeds = [p.decode_tps if p.usable and ram_ok else None for p in preds]
    no_cache = {
        name: predict(model, hw, params, replace(base, placement=Placement.parse(flag)), rel_error=rel)
        for name, flag in (("--fit", "fit"), ("--cpu-moe", "cpu-moe"))
    }
    reference = load_reference()
    measured = reference[
        (reference["gpu"] == hw.name)
        & (reference["model"] == model.name.split(" (")[0])
        & (reference["parallel"] == concurrency)
        & reference["decode_tps"].notna()
        & (reference["placement"] == placement_name.split(" ")[0])
    ]
    logged = st.session_state.get("measured_points")
    if logged is not None and len(logged):
        measured = pd.concat([measured, logged[logged["model"] == model.name]], ignore_index=True)
    chosen = predict_curve(model, hw, params, base, [current], n_ub, policy_traffic, rel, spread)[0]
    same_without = predict(model, hw, params, base, rel_error=rel)
    with charts:
        headline = st.container()
        host = host_memory(model, hw, chosen.layout.placement, load_mode)
        with headline:  # drawn before the charts, so that it is the first thing a change updates
            usable = fit_verdicts(chosen.vram, host)
            if not chosen.starts:
                st.error(f"At {current.budget_mib:,} MiB llama-server would not start: {chosen.error}")
            elif usable:
                lo, hi = chosen.decode_tps_range
                cache_verdict = verdict(chosen, same_without) if current.budget_mib else "no cache"
                st.markdown(
                    f"**At {current.budget_mib:,} MiB**: {chosen.decode_tps:.1f} t/s decode (range {lo:.1f}–{hi:.1f}), "
                    f"{chosen.prefill_tps:,.0f} t/s prompt (model), hit rate {100 * (chosen.hit_rate or 0):.1f} % "
                    f"(simulated), {len(chosen.layout.host_layers)} layers' experts in host memory, "
                    f"VRAM left {chosen.vram.free_mib:,.0f} MiB. The cache **{cache_verdict}** against the same "
                    f"placement without it ({same_without.decode_tps:.1f} t/s)."
                )
            else:
                st.markdown(f"**At {current.budget_mib:,} MiB**: does not fit, so no speed is shown.")
            best_setting(model, source, model_key, hw, time_model, concurrency, n_ctx)
        st.plotly_chart(
            shade_unfit(
                speed_curve(
                    budgets,
                    speeds,
                    {f"{n}, no cache": p.decode_tps for n, p in no_cache.items()},
                    measured,
                    budget,
                    [p.decode_tps_range if p.usable and ram_ok else None for p in preds],
                ),
                fits,
                budgets[-1],
            ),
            width="stretch",
            key="speed",
        )
        a, b = st.columns(2)
        a.plotly_chart(shade_unfit(hit_rate_curve(results, budget), fits, budgets[-1]), width="stretch", key="hits")
        b.plotly_chart(shade_unfit(upload_curve(results, budget), fits, budgets[-1]), width="stretch", key="uploads")
        a.plotly_chart(layer_hit_rates(current), width="stretch", key="layers")
        compare = {**no_cache, f"{placement_name} + {current.budget_mib} MiB": chosen}
        b.plotly_chart(time_breakdown({k: v for k, v in compare.items() if v.starts}), width="stretch", key="breakdown")
        for note in chosen.notes:
            st.caption(note)
        st.caption(f"Time model parameters: {params_source}. Residuals: the Reference page.")
    table = pd.DataFrame(
        {
            "budget_mib": [r.budget_mib for r in results],
            "starts": [r.starts for r in results],
            "hit_rate_small": [r.small.hit_rate for r in results],
            "hit_rate_large": [r.large.hit_rate for r in results],
            "uploaded_mib_per_token": [r.uploaded_bytes_per_token() / 2**20 for r in results],
            "predicted_decode_tps": speeds,
        }
    )
    d1, d2 = st.columns(2)
    d1.download_button("curve as CSV", table.to_csv(index=False), file_name="moe-cache-curve.csv", key="dl_curve")
    d2.download_button(
        "workload as NPZ (replay it with `simulate --trace`)",
        workload_npz(work, work_key),
        file_name="workload.npz",
        key="dl_work",
    )

    st.subheader("Replacement policies on this workload")
    st.caption(
        "llama.cpp's LRU (exact) is the reference; newer builds' policies and the alternatives are labelled "
        "exact or modelled (see docs/models-and-fits.md). Belady's optimum is the upper bound no policy can pass."
    )
    names = st.multiselect("policies", list(POLICIES), list(POLICIES), key="policies")
    if names and st.toggle("compare them (runs each policy at every budget)", False, key="compare_policies"):
        part = work.prefix(int(np.searchsorted(work.rec_ubatch, MAX_POLICY_UBATCHES)))
        policy_budgets = tuple(sorted(set(np.linspace(lowest, max(full, lowest), N_POLICY_BUDGETS).astype(int))))
        comparison = cached_policy_comparison(
            model, model_key, part, work_key, layout0.placement, policy_budgets, tuple(names)
        )
        tps = {
            name: [predicted_tps(model, hw, params, base, r, decode_ubatches(part)) for r in runs]
            for name, runs in comparison.results.items()
        }
        p1, p2 = st.columns(2)
        p1.plotly_chart(
            policy_curves(policy_budgets, comparison.hit_rates(), comparison.labels(), REFERENCE, mark_budget=budget),
            width="stretch",
            key="policy_hits",
        )
        p2.plotly_chart(
            policy_curves(policy_budgets, tps, comparison.labels(), REFERENCE, "predicted decode t/s", budget),
            width="stretch",
            key="policy_tps",
        )
        st.caption(
            f"First {part.n_ubatches:,} ubatches of the workload, at the placement of the lowest budget. "
            "t/s: the time model (a model, not a measurement), misses a policy does not keep counted as a CPU share. "
            + " ".join(f"{n}: {comparison.seconds[n]:.1f} s." for n in names)
        )
