"""Hardware shopping: will this card run this model well? Best predicted setting per card, side by side."""

import pandas as pd
import streamlit as st

from moe_model.answers.basis import LOGS, MEASURED, MODELLED, SYNTHETIC, TRACE, Basis, prediction_basis
from moe_model.answers.fit_advice import CardAnswer, card_answer, shopping_share_note
from moe_model.answers.shopping_lead import fit_lines, shopping_lead
from moe_model.charts import shopping_bars, with_basis
from moe_model.fits.calibration import default_time_model, prompt_speed
from moe_model.fits.log_timings import request_label
from moe_model.policies.knobs import SHARE
from moe_model.speed.hardware import PRESETS, Hardware
from moe_model.speed.ranges import POLICY_SOURCE
from moe_model.speed.streams import per_stream_tps, speed_label
from ui.badges import badge
from ui.cached import bundled_traces, trace_workload
from ui.cached_recommend import cached_recommend_cards
from ui.host_run import sidebar_host_run, time_model_with, with_host_run
from ui.machine import in_host
from ui.request import app_scenario, kept_page_controls
from ui.session_logs import log_routing
from ui.shopping_table import table
from ui.sidebar import (
    policy_caption,
    sidebar_build,
    sidebar_calibrated,
    sidebar_hardware,
    sidebar_model,
    sidebar_serving,
)
from ui.startup import through_app
from ui.state import HARDWARE, keep, kept, kept_toggle
from ui.text import literal
from ui.uploads import trace_upload
from ui.widgets import friendly_errors, model_flag_path, range_caption, runnable, setting_input

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

st.header("Hardware shopping")
verdict = st.empty()  # filled once every card is simulated: the answer for the user's own card leads the page
st.caption(
    "Predicted with the calibrated time model and simulated hit rates (a model, not a measurement). "
    "Parameters fitted across the measured machines; each range is the error on machines left out of the fit. "
    "Your machine (the sidebar's, edits and calibration included) leads; every other card sits in your host: "
    "its RAM, memory bandwidth, CPU threads and link."
)
OTHERS = ["Tesla T4", "RTX 3060 12GB", "RTX 4080 16GB", "RTX 4090", "RTX 5090", "eGPU RTX 4090, PCIe 3.0 x4"]


def chosen_cards(gpu: str) -> list[str]:
    """The compared cards: kept across pages and in the URL (;-separated: names hold commas), the sidebar GPU first."""
    default = [gpu, *(c for c in OTHERS if c != gpu)]
    names = [c for c in kept("cards", ";".join(default)).split(";") if c in PRESETS]
    cards = st.multiselect("GPUs", list(PRESETS), default=names, key="cards")
    keep(cards=";".join(cards))
    return cards


def readings_columns(p) -> dict:
    """The decode speeds b12170+ ClassLRU's open readings span (its range source), 0 where none."""
    band = next((s for s in p.range_sources if s.source == POLICY_SOURCE), None) if p else None
    return {
        "readings low t/s": round(band.low_tps, 1) if band else 0.0,
        "readings high t/s": round(band.high_tps, 1) if band else 0.0,
        "readings t/s": f"{band.low_tps:.1f}–{band.high_tps:.1f}" if band else "",
    }


def drafting_text(sc) -> str:
    """Explore's drafting, which every card's pick is made at."""
    return (
        f" Speculative decoding as set on Explore: {sc.draft_tokens} draft tokens at {sc.accept_rate:.0%} acceptance."
    )


LOGS_ROUTING, PRESET_ROUTING, UPLOAD = "fitted to your logs", "the synthetic preset", "your trace (upload)"


def routing_choice(model, routing):
    """The routing every card replays: fitted to the session's logs, the synthetic preset, a bundled real trace or
    the user's trace (a recorded one: replayed exactly); kept across pages. The trace: a path or (bytes, name)."""
    traces = bundled_traces(model)
    kinds = [*([LOGS_ROUTING] if routing else []), PRESET_ROUTING, *traces, UPLOAD]
    kind = st.radio("routing", kinds, kinds.index(kept("shop_routing", kinds[0], choices=kinds)), key="shop_routing")
    keep(shop_routing=kind)
    if kind == UPLOAD:
        upload = trace_upload()
        if upload is None:
            st.caption("No trace yet: the synthetic preset meanwhile.")
            return PRESET_ROUTING, None
        return kind, (upload.data, upload.name)
    return kind, traces.get(kind)


def bars_basis(bases: list[Basis]) -> tuple:
    """How the chart's bars are known (charts.with_basis): one word, or the user's card's and the others'."""
    words = dict.fromkeys(b.decode for b in bases)
    return tuple(words) if len(words) == 1 else ((bases[0].decode, "your card"), (bases[-1].decode, "the others"))


TOTALS = ("decode t/s", "decode range t/s", "low t/s", "high t/s")  # at -np > 1 the total over the streams, named so


def shown(frame: pd.DataFrame, concurrency: int) -> pd.DataFrame:
    """The table as shown: without the commands (printed below it), a total's column named a total."""
    return frame.drop(columns="command").rename(columns={c: speed_label(c, concurrency) for c in TOTALS})


def row(answer: CardAnswer, mine: bool, prefill_rel_error: float, banded: bool, basis: Basis) -> dict:
    """One card's line; `banded`: with the span of ClassLRU's open readings (none where the logs picked one);
    `basis`: how its numbers are known."""
    hw, best = answer.hardware, answer.options[0]
    p = best.prediction
    ps = prompt_speed(p, prefill_rel_error)
    return {
        "GPU": hw.name,
        "machine": "yours (sidebar)" if mine else "in your host",
        "link": hw.pcie_label,
        "best setting": best.label if best.usable else "nothing fits (VRAM or RAM)",
        "what would fit": answer.fit_line or "",
        "decode t/s": round(p.decode_tps, 1) if best.usable else 0.0,
        "decode range t/s": f"{p.decode_tps_range[0]:.1f}–{p.decode_tps_range[1]:.1f}" if best.usable else "",
        "low t/s": round(p.decode_tps_range[0], 1) if best.usable else 0.0,
        "high t/s": round(p.decode_tps_range[1], 1) if best.usable else 0.0,
        **(readings_columns(p if best.usable else None) if banded else {}),
        **(
            {"per stream t/s": round(per_stream_tps(p.decode_tps, p.scenario.concurrency), 1) if best.usable else 0.0}
            if p.scenario.concurrency > 1
            else {}
        ),
        "prompt t/s": round(ps.prefill_tps) if best.usable else 0.0,
        "prompt low": round(ps.prefill_tps_range[0]) if best.usable else 0.0,
        "prompt high": round(ps.prefill_tps_range[1]) if best.usable else 0.0,
        "first token s": round(ps.ttft_s, 2) if best.usable else 0.0,
        "first token range s": f"{ps.ttft_s_range[0]:.2f}–{ps.ttft_s_range[1]:.2f}" if best.usable else "",
        "decode is": basis.decode,
        "hit rate is": basis.hit_rate,
        "prompt is": basis.prompt,
        "cache verdict": best.verdict if best.usable else "",
        "RAM": best.host.verdict.split(":")[0] if best.host else "",
        "command": best.command if best.usable else "",
    }


with friendly_errors():
    model, source, model_key = sidebar_model()
    mine, my_tm, _ = sidebar_hardware()
    host_run = sidebar_host_run()
    mine = with_host_run(mine, model, host_run)  # its measured host terms go with the host to every card (in_host)
    my_tm = time_model_with(my_tm, host_run, sidebar_calibrated())
    serving = sidebar_serving(prompt=True)
    ctx, concurrency, prompt, depth = (serving[k] for k in ("n_ctx", "concurrency", "prompt_tokens", "depth"))
    build = sidebar_build()
    routing = log_routing(model, mine, build)
    kind, trace = routing_choice(model, routing)
    request = app_scenario(serving, build, **kept_page_controls(build))
    work = None if trace is None else trace_workload(trace, model.n_expert, request)
    routing = routing if kind == LOGS_ROUTING else None
    cards = chosen_cards(mine.name)
    recorded = f"; {badge(MEASURED)} threads and RAM from your CPU run where it recorded them" if host_run else ""
    st.caption(
        f"Context {ctx:,}, {concurrency} stream(s) decoding {depth:,} tokens deep after a {prompt:,}-token prompt "
        f"(decode{speed_label('', concurrency)}, prompt and first-token figures: a model, with the held-out "
        "error's range), "
        f"your host: {mine.ram_gib:g} GiB RAM, {mine.cpu_bw_gbs:g} GB/s, "
        f"{mine.cpu_threads} threads, {mine.pcie_label} slot (sidebar{recorded}). Each pick compares mmap'd and pinned "
        f"(--load-mode none) host experts. Decode speeds: the {request_label(first=False)} (the requests after a "
        "server's first)."
        + (f" Routing {routing.describe()}." if routing else "")
        + (drafting_text(request) if request.draft_tokens else "")
    )
    with st.expander("custom card"):
        use_custom = kept_toggle(st, "add a custom card", "custom_on", False)
        cc = st.columns(4)  # the card's own figures: its host is yours
        starts = {"vram_gib": 16.0, "gpu_bw_gbs": 500.0, "pcie_gen": 4, "pcie_lanes": 16}
        fields = [setting_input(c, HARDWARE[n], v, f"c_{n}") for c, (n, v) in zip(cc, starts.items(), strict=True)]
        custom = Hardware("custom", *fields, host=mine.host, source="user")
    others = [PRESETS[name] for name in cards if name != mine.name] + ([custom] if use_custom else [])
    card_tm = time_model_with(default_time_model(), host_run, False)  # your CPU run goes with your host to each card
    machines = [(mine, my_tm, True)] + [(in_host(card, mine), card_tm, False) for card in others]
    hardware, tms = [hw for hw, _, _ in machines], [tm for _, tm, _ in machines]
    path = model_flag_path(source, model_key)
    rows, bar = [], st.progress(0.0, "Simulating each card's candidates...")
    working, so_far = st.container(), st.empty()  # each card's progress, then the table so far
    reading = request.policy_reading  # the calibrated machine's ClassLRU reading: every card replays it, no band
    each = cached_recommend_cards(model, path, hardware, tms, request, routing, work, working)  # on page-work threads
    answers, bases, routed = [], [], TRACE if work is not None else LOGS if routing else SYNTHETIC
    shared = request.with_knobs({SHARE.name: 0.0})  # the build's own policy: a CPU share is each pick's own
    for (hw, tm, is_mine), options in zip(machines, each, strict=True):
        answers.append(card_answer(model, hw, options))
        basis = prediction_basis(
            routed, shared, hw, machine_calibrated=is_mine and sidebar_calibrated(), rel_error=tm.rel_error,
            prefill_rel_error=tm.prefill_rel_error,
        )  # fmt: skip
        rows.append(row(answers[-1], is_mine, tm.prefill_rel_error, not reading, basis))
        bases.append(basis)
        bar.progress(len(rows) / len(machines), f"{len(rows)} of {len(machines)} cards simulated")
        table(shown(pd.DataFrame(rows), concurrency), concurrency, so_far)
    bar.empty()
    so_far.empty()
    frame = pd.DataFrame(rows)
    with verdict.container():
        lead = shopping_lead(model.name, answers, [b.decode for b in bases])
        (st.warning if lead.warns else st.info)("\n\n".join(lead.lines(badge)))  # slow or unusable: never a success
        if lead.nearest_line:
            st.caption(f"{badge(MEASURED)} {literal(lead.nearest_line, None)}")
        if answers[0].best:
            range_caption(answers[0].best.prediction, bases[0].decode)
        fits = fit_lines(answers)
        if fits:  # the memory accounts are the model's, as Explore's fit verdicts say
            st.markdown("**What would fit**, per card:\n" + "\n".join(f"- {line} {badge(MODELLED)}" for line in fits))
        share = shopping_share_note(model, answers, request.cpu_share, build)
        if share:  # one line for every card: it depends on the model and the build, not the card
            st.caption(f"{share[0].upper()}{share[1:]}.")
    running = frame[frame["command"] != ""]
    if len(running):  # no chart of cards that cannot run: their bars would be an empty axis
        st.plotly_chart(with_basis(shopping_bars(running, concurrency), *bars_basis(bases)), width="stretch",
                        key="shop_chart")  # fmt: skip
    table(shown(frame, concurrency), concurrency)
    st.caption(policy_caption(shared))
    st.caption(
        f"Your machine: {bases[0].tagged_line(badge)}"
        + (f" {badge(MEASURED)} Host: {host_run.described}." if host_run else "")
    )
    if reading:
        picked = ", ".join(f"{k} {v}" for k, v in reading)
        st.caption(f"ClassLRU's reading your logs picked ({picked}), replayed alone for every card: no readings band.")
    commands = "\n".join(f"# {r['GPU']}\n{r['command']}" for r in rows if r["command"])
    if commands:
        st.markdown("**Each card's best command**:")
        st.code(runnable(commands, source), language="bash", wrap_lines=True)
    others = bases[1].decode if len(bases) > 1 else MODELLED  # the others' decode: modelled, or a CPU run's
    st.caption(
        f"{badge(bases[0].decode)} Time model: {my_tm.source} (your machine); {badge(others)} "
        f"{default_time_model().source} (the others). Pinned host "
        "experts upload faster, but the CPU path over pinned memory can be slower and pinning needs the RAM; each "
        "pick says which won. CPU shares are a modelled policy, picked only when they win by more than the "
        "prediction's error."
    )
    st.download_button(
        "comparison as CSV", frame.to_csv(index=False), file_name="hardware-comparison.csv", key="dl_shop"
    )
