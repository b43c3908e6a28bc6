"""Tables as a reader sees them: column names with units instead of field names, a log run as rows of text.

The data, the CSV downloads and the JSON keep their field names (scripts read them); only the page shows these."""

from __future__ import annotations

import pandas as pd

from moe_model.readers.buffer_words import buffer_words
from moe_model.readers.logs import LogRun
from moe_model.speed.streams import column_label

LABELS = {
    "id": "point",
    "gpu": "GPU",
    "gpu_vram_gib": "VRAM GiB",
    "pcie": "PCIe link",
    "model_file": "model file",
    "model_file_gb": "model file GB",
    "moe_cache_mib": "budget MiB",
    "budget_mib": "budget MiB",
    "parallel": "streams (-np)",
    "spec_draft_tokens": "draft tokens",
    "draft_tokens": "draft tokens",
    "accept_rate": "draft acceptance",
    "cpu_share": "CPU share",
    "hit_rate_small_pct": "hit rate, ubatch <= 8 %",
    "hit_rate_large_pct": "hit rate, ubatch > 8 %",
    "hit_rate_pct": "hit rate %",
    "uploaded_mib_per_token": "uploaded MiB per token",
    "decode_tps": "decode t/s",
    "decode_tps_per_stream": "decode t/s per stream",
    "prefill_tps": "prompt t/s",
    "load_mode": "--load-mode",
    "n_ctx": "context (-c)",
    "kv_type": "KV cache type",
    "n_ubatch": "ubatch (-ub)",
    "prompt_tokens": "prompt tokens",
    "control_row": "row without the cache",
    "use": "used in the fit",
    "source_url_or_repo_path": "source",
    "control": "point without the cache",
    "measured_ratio": "measured speed ÷ without the cache",
    "predicted_ratio": "predicted speed ÷ without the cache",
    "measured": "measured verdict",
    "predicted": "predicted verdict",
    "ok": "verdicts agree",
    "n_layers": "number of layers",
    "slot_bytes": "bytes per slot",
    "n_slots": "slots",
    "max_slots": "slots to cache all",
    "percent": "cached %",
    "engine": "engine (llama.cpp or a fork)",
    "build": "llama.cpp build",
}


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with readable column names (a field without a label loses its underscores); a decode speed beside
    its runs' streams is named a total where they decode several."""
    labels = dict(LABELS)
    if "parallel" in frame and "decode_tps" in frame:
        parallel = [int(n) for n in frame["parallel"].dropna()]
        labels["decode_tps"] = column_label(LABELS["decode_tps"], parallel)
    return frame.rename(columns=lambda name: labels.get(name, name.replace("_", " ")))


def _stats(stats) -> str:
    rate = "no lookups" if stats.hit_rate is None else f"{100 * stats.hit_rate:.1f} %"
    return f"{stats.hits:,} hits, {stats.misses:,} misses ({rate}), {stats.uploaded_mib:,.0f} MiB uploaded"


def run_summary(run: LogRun) -> pd.DataFrame:
    """What one logged run says, as rows of text (what the log names, with units), not its raw fields."""
    model, where = run.model, run.placement
    rows = [("program", run.program), ("command line", run.command)]
    build = f"b{run.build}" if run.build else "not logged (no `build:` line, or built without git)"
    rows += [("llama.cpp build", build), ("engine", run.engine)]
    if cache := run.fork_cache:
        auto = (
            f", --fit's automatic {cache['percent']} % of {cache['expert_mib']:,.0f} MiB" if "percent" in cache else ""
        )
        rows.append(("the fork's cache", f"{cache.get('cache_mib', '?')} MiB, {cache.get('slots', '?')} slots{auto}"))
    if model:
        detail = ", ".join(str(model[k]) for k in ("architecture", "file_type", "file_size") if model.get(k))
        rows.append(("model", f"{model.get('name', 'unnamed')} ({detail})" if detail else model.get("name")))
        if "n_layer" in model and "n_expert" in model:
            used = f", {model['n_expert_used']} used per token" if "n_expert_used" in model else ""
            rows.append(("layers and experts", f"{model['n_layer']} layers, {model['n_expert']} experts{used}"))
    if "gpu" in where:
        vram = f" ({where['gpu_vram_mib']:,} MiB)" if "gpu_vram_mib" in where else ""
        rows.append(("GPU", f"{where['gpu']}{vram}"))
    if "offloaded_layers" in where:
        rows.append(("layers on the GPU (-ngl)", f"{where['offloaded_layers']} of {where.get('total_layers', '?')}"))
    rows += [
        (label, f"{where[key]:,}")
        for label, key in (("context (-c)", "n_ctx"), ("streams (-np)", "n_seq_max"), ("ubatch (-ub)", "n_ubatch"))
        if key in where
    ]
    for key, label in (
        ("model_buffers_mib", "model weights"),
        ("kv_buffers_mib", "KV cache"),
        ("compute_buffers_mib", "compute buffers"),
    ):
        if where.get(key):
            rows.append((label, buffer_words(where[key])))
    rows += [
        (f"MoE cache on {d.name}", f"{d.cache_mib:,.2f} MiB for {d.host_experts_mib:,.0f} MiB of host experts")
        for d in run.devices
    ]
    rows += [
        (f"cache group {i + 1}", f"{g.n_layers} layers, {g.type}: {g.n_slots:,} slots ({g.percent:g} %)")
        for i, g in enumerate(run.groups)
    ]
    for label, stats in (("ubatches <= 8 tokens", run.small), ("ubatches > 8 tokens", run.large)):
        if stats is not None:
            rows.append((label, _stats(stats)))
    if run.copied_experts:
        rows.append(
            ("large batches", f"{run.copied_experts:,} experts copied from the cache, {run.copied_mib:,.0f} MiB")
        )
    rows += [
        (
            f"request {t.task} (slot {t.slot})",
            f"{t.prompt_tokens:,} prompt tokens"
            + (f" at {t.prompt_tps:,.1f} t/s" if t.prompt_tps else "")
            + f", {t.decode_tokens:,} decoded"
            + (f" at {t.decode_tps:,.1f} t/s" if t.decode_tps else ""),
        )
        for t in run.timings
    ]
    return pd.DataFrame([(what, text) for what, text in rows if text], columns=["what", "logged"])


def calibration_table(result) -> pd.DataFrame:
    """A machine calibration's runs: each error in the fit and when left out, in % with one decimal (text, so
    that the table shows what it means and not four decimals of noise)."""
    runs = result.runs
    return pd.DataFrame(
        {
            "run": [r.name for r in runs],
            "streams": [r.concurrency for r in runs],
            "first request after start": ["yes" if r.first_request else "no" for r in runs],
            "error in the fit %": [f"{100 * result.fit_errors[r.name]:+.1f}" for r in runs],
            "error when left out %": [f"{100 * result.left_out_errors[r.name]:+.1f}" for r in runs],
            "judges the fit": ["yes" if r.name in result.judged else "no" for r in runs],
        }
    )


def _range(check) -> str:
    return f"{check.predicted_tps:,.1f} ({check.low_tps:,.1f}-{check.high_tps:,.1f})"


def _pct_or_dash(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}"


def before_calibration_table(result) -> pd.DataFrame:
    """Each run's measured speeds beside the range predicted before calibration (answers.before_calibration), as
    text: the figures as the page says them, "inside" or how far outside."""
    rows = [
        {
            "run": r.name,
            "budget MiB": f"{r.budget_mib:,}",
            "streams (-np)": r.concurrency,
            "timed": r.request,
            "decode t/s measured": f"{r.decode.measured_tps:,.1f}",
            "decode t/s predicted (range)": _range(r.decode),
            "decode": r.decode.words,
            "prompt t/s measured": "-" if r.prompt is None else f"{r.prompt.measured_tps:,.1f}",
            "prompt t/s predicted (range)": "-" if r.prompt is None else _range(r.prompt),
            "prompt": "-" if r.prompt is None else r.prompt.words,
            "hit rate % logged": _pct_or_dash(r.logged_hit_rate),
            "hit rate % predicted": _pct_or_dash(r.predicted_hit_rate),
        }
        for r in result.runs
    ]
    return pd.DataFrame(rows)
