"""What the commands print: strictly valid JSON, and the plain-text reports of plan, simulate and parse-log."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np

from moe_model.readers.buffer_words import buffer_words
from moe_model.workload import Workload, WorkloadStream

if TYPE_CHECKING:
    from moe_model.llama.simulate import SimResult


def _finite(value):
    """JSON has no Infinity or NaN (a log's `uploaded = 1e400` overflows to inf): they become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def to_json(value) -> str:
    """Strictly valid JSON (allow_nan=False) of a report; other objects are written as their str()."""
    return json.dumps(_finite(value), indent=1, default=str, allow_nan=False)


def format_plan(report: dict) -> str:
    m = report["model"]
    lines = [
        f"{m['name']} ({m['architecture']}, {m['file_type']}): {m['n_layer']} layers, "
        f"{m['n_expert']} experts, {m['n_expert_used']} used per token, {m['expert_mib']:.2f} MiB of experts",
        f"--moe-cache-mib {report['budget_mib']}: "
        + ("starts" if report["starts"] else f"refuses to start ({report['error']})"),
        "",
        "llama-server -lv 4 would print:",
        *(f"  {line}" for line in report["log_lines"]),
        "",
        f"smallest budget that starts: {report['min_budget_mib']} MiB",
        f"smallest budget that caches every expert: {report['full_budget_mib']} MiB",
    ]
    return "\n".join(lines)


def _rate(stats) -> str:
    return "-" if stats.hit_rate is None else f"{100 * stats.hit_rate:.2f}%"


def format_sim(results: list[SimResult], work: Workload | WorkloadStream) -> str:
    banded = any(r.band for r in results)  # a modelled policy's open readings (b12170+ ClassLRU)
    lines = [
        f"workload: {work.label or 'trace'}: {work.decode_tokens:,} decode tokens, {work.n_ubatches:,} ubatches",
        f"{'budget MiB':>10} {'starts':>6} {'slots':>7} {'hit <=8':>8} {'hit >8':>8} "
        f"{'upload MiB/token':>17} {'copied':>8}" + (f" {'readings (all)':>15}" if banded else ""),
    ]
    for r in results:
        band = f" {_band(r):>15}" if banded else ""
        lines.append(
            f"{r.budget_mib:>10} {str(r.starts):>6} {r.plan.n_slots_total:>7} {_rate(r.small):>8} {_rate(r.large):>8} "
            f"{r.uploaded_bytes_per_token() / 2**20:>17.2f} {r.copied_experts:>8}{band}"
        )
    if banded:
        lines.append("readings (all): the hit rate over all lookups under ClassLRU's open readings, lowest-highest")
    return "\n".join(lines)


def _band(r: SimResult) -> str:
    return "-" if r.band is None else f"{100 * r.band.hit_rate_low:.1f}-{100 * r.band.hit_rate_high:.1f}%"


def format_policies(policies: list[dict]) -> str:
    lines = ["", "hit rate by policy:", f"{'budget MiB':>10} " + " ".join(f"{p['name']:>17}" for p in policies)]
    for i, b in enumerate(policies[0]["budgets"]):
        rates = [p["budgets"][i]["hit_rate"] for p in policies]
        lines.append(
            f"{b['budget_mib']:>10} " + " ".join("-".rjust(17) if h is None else f"{100 * h:16.2f}%" for h in rates)
        )
    lines.append("labels: " + ", ".join(f"{p['name']} {p['label']}" for p in policies))
    lines += [f"note ({p['name']}): {n}" for p in policies for n in p.get("notes", ())]
    return "\n".join(lines)


def format_run(run: dict, check: list | None) -> str:
    m, p = run["model"], run["placement"]
    lines = [f"run {run['index'] + 1}: {run['program']}" + ("" if run["starts"] else " (did not start)")]
    if m:
        lines.append(
            f"  model: {m.get('name', '?')} ({m.get('architecture', '?')}, {m.get('file_type', '?')}), "
            f"{m.get('n_layer', '?')} layers, {m.get('n_expert', '?')} experts, {m.get('n_expert_used', '?')} used"
        )
    if p:
        lines.append(
            f"  placement: {p.get('offloaded_layers', '?')}/{p.get('total_layers', '?')} layers on the GPU (-ngl), "
            f"streams (-np) {p.get('n_seq_max', 1)}, context (-c) {p.get('n_ctx', '?')}"
        )
        lines += [
            f"  {what}: {buffer_words(p[key])}"
            for key, what in (("model_buffers_mib", "model weights"), ("kv_buffers_mib", "KV cache"))
            if p.get(key)
        ]
    lines += [
        f"  MoE cache on {d['name']}: {d['cache_mib']:,.2f} MiB for {d['host_experts_mib']:,.2f} MiB of host experts"
        for d in run["devices"]
    ]
    lines += [
        f"  {g['n_layers']:2d} layers, {g['type']}: {g['n_slots']} slots ({g['percent']}%)" for g in run["groups"]
    ]
    for name in ("small", "large"):
        if st := run["stats"][name]:
            rate = "-" if st["hit_rate"] is None else f"{100 * st['hit_rate']:.2f}%"
            lines.append(
                f"  ubatch {'<= 8' if name == 'small' else ' > 8'}: hit rate {rate} "
                f"({st['hits']} hits, {st['misses']} misses), uploaded {st['uploaded_mib']:.2f} MiB"
            )
    if run["stats"]["copied"]["experts"]:
        lines.append(f"  large batches copied {run['stats']['copied']['experts']} experts from the cache")
    lines += [
        f"  request: {t['prompt_tokens']} prompt tokens at {t['prompt_tps'] or 0:.1f} t/s, "
        f"{t['decode_tokens']} generated at {t['decode_tps'] or 0:.1f} t/s"
        for t in run["timings"]
    ]
    lines += [f"  warning: {w}" for w in run["warnings"]] + [f"  error: {e}" for e in run["errors"]]
    lines += [f"  note: {n}" for n in run["notes"]]
    for c in check or []:
        status = {True: "ok", False: "MISMATCH", None: "info"}[c["ok"]]
        lines.append(f"  check {status:8} {c['what']}: logged {c['logged']} | header says {c['predicted']}")
    return "\n".join(lines)
