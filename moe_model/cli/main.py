"""Command line: `python -m moe_model {plan,simulate,...} ...`.

Flags and JSON fields are a contract other tools script against: keep their names.
Exit 0 when the input was read (also when the server would not start), 1 with a one-line
message on stderr when it could not be, and from `recommend` when no setting fits.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.limits import (
    MAX_BUDGET_MIB,
    MAX_CONCURRENCY,
    MAX_CTX,
    MAX_DRAFT_TOKENS,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_PROMPT_TOKENS,
    MAX_RATE_GBS,
    MAX_SPLIT_SHARE,
    MAX_SYNTHETIC_TOKENS,
    MAX_UBATCH,
    MAX_VRAM_GIB,
)
from moe_model.llama.batching import stream_from, workload_from
from moe_model.llama.slot_plan import Placement, plan_report
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.traces import load_any, open_trace, save_npz
from moe_model.speed.vram import KV_TYPES
from moe_model.workload import Batching, Workload, WorkloadStream

if TYPE_CHECKING:
    from moe_model.llama.simulate import SimResult

MAX_BUDGETS = 512


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


def _ranged(cast: Callable, lo, hi) -> Callable[[str], object]:
    """An argparse type: `cast`, then in [lo, hi] (and finite), else a one-line usage error naming the range."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"must be in {lo:,}..{hi:,}, got {text}")
        return value

    parse.__name__ = cast.__name__  # argparse names the type in its messages
    return parse


_BUDGET = _ranged(int, 0, MAX_BUDGET_MIB)
_CONCURRENCY = _ranged(int, 1, MAX_CONCURRENCY)
_DRAFT = _ranged(int, 0, MAX_DRAFT_TOKENS)
_FRACTION = _ranged(float, 0.0, 1.0)
_LAYERS = _ranged(int, -1, MAX_LAYERS)
_RATE = _ranged(float, 0.001, MAX_RATE_GBS)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _split(text: str) -> tuple[float, ...]:
    """--tensor-split: at most MAX_GPUS finite shares, each in 0..MAX_SPLIT_SHARE (nan and inf are refused)."""
    shares = tuple(_ranged(float, 0, MAX_SPLIT_SHARE)(x) for x in text.split(","))
    if len(shares) > MAX_GPUS:
        raise argparse.ArgumentTypeError(f"at most {MAX_GPUS} values (one per GPU), got {len(shares)}")
    return shares


def _add_placement_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n-cpu-moe",
        type=_ranged(int, 0, MAX_LAYERS),
        metavar="K",
        help="experts of the first K layers in host memory (default: --cpu-moe, all layers)",
    )
    parser.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=_LAYERS,
        default=-1,
        metavar="N",
        help="layers offloaded to the GPU(s) (default: all)",
    )
    parser.add_argument(
        "--tensor-split",
        "-ts",
        type=_split,
        default=(),
        metavar="A,B,...",
        help="split of layers and budget across GPUs",
    )


def placement_from_args(args: argparse.Namespace) -> Placement:
    n_gpus = max(1, len(args.tensor_split))
    if args.n_cpu_moe is None:
        return Placement(cpu_moe=True, n_gpu_layers=args.n_gpu_layers, n_gpus=n_gpus, tensor_split=args.tensor_split)
    return Placement(
        cpu_moe=False,
        n_cpu_moe=args.n_cpu_moe,
        n_gpu_layers=args.n_gpu_layers,
        n_gpus=n_gpus,
        tensor_split=args.tensor_split,
    )


def _format_plan(report: dict) -> str:
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


def cmd_plan(args: argparse.Namespace) -> int:
    report = plan_report(load_model(args.source), args.budget_mib, placement_from_args(args))
    print(to_json(report) if args.json else _format_plan(report))
    return 0


def _budget_list(args: argparse.Namespace) -> list[int]:
    if args.budget_mib is not None:
        budgets = [args.budget_mib]
    elif args.budgets_mib is not None:
        budgets = [int(x) for x in args.budgets_mib if math.isfinite(x)]
        if len(budgets) != len(args.budgets_mib):
            raise MoeModelError("budgets must be finite numbers of MiB")
    else:
        lo, hi, count = args.budget_range
        budgets = sorted({int(round(x)) for x in np.linspace(lo, hi, int(count))})
    if not budgets or len(budgets) > MAX_BUDGETS or min(budgets) < 0 or max(budgets) > MAX_BUDGET_MIB:
        raise MoeModelError(f"give 1..{MAX_BUDGETS} budgets of 0..{MAX_BUDGET_MIB:,} MiB")
    return budgets


def _range(text: str) -> tuple[float, float, float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected LO:HI:COUNT, got {text!r}")
    lo, hi, count = _floats(",".join(parts))
    if not (0 <= lo <= hi <= MAX_BUDGET_MIB and 1 <= count <= MAX_BUDGETS):
        raise argparse.ArgumentTypeError(f"expected 0 <= LO <= HI and 1 <= COUNT <= {MAX_BUDGETS}, got {text!r}")
    return lo, hi, count


def _workload(args: argparse.Namespace, model: ModelSpec, whole: bool) -> Workload | WorkloadStream:
    """The routing to replay: streamed chunk by chunk, or held `whole` (exporting it, replaying other policies)."""
    from moe_model.routing.synthetic import Knobs, Shape, generate, preset_for  # imported here: `plan` starts in < 1 s

    batching = Batching(
        args.concurrency, args.draft, args.accept, args.prompt_tokens, args.ubatch_size, not args.no_warmup, args.seed
    )
    if args.trace:
        if whole:
            return workload_from(load_any(args.trace), batching, model.n_expert)
        return stream_from(open_trace(args.trace), batching, model.n_expert)
    preset = preset_for(model)
    name, knobs = preset
    knobs = Knobs(
        *(
            v if v is not None else d
            for v, d in zip(
                (args.skew, args.working_set, args.drift, args.reuse),
                (knobs.skew, knobs.working_set, knobs.drift, knobs.reuse),
                strict=True,
            )
        )
    )
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    trace = generate(
        shape, knobs, args.tokens, seed=args.seed, label=f"synthetic ({name} preset, {preset.match}) {knobs}"
    )
    return (workload_from if whole else stream_from)(trace, batching, model.n_expert)


def _rate(stats) -> str:
    return "-" if stats.hit_rate is None else f"{100 * stats.hit_rate:.2f}%"


def _format_sim(results: list[SimResult], work: Workload | WorkloadStream) -> str:
    lines = [
        f"workload: {work.label or 'trace'}: {work.decode_tokens:,} decode tokens, {work.n_ubatches:,} ubatches",
        f"{'budget MiB':>10} {'starts':>6} {'slots':>7} {'hit <=8':>8} {'hit >8':>8} "
        f"{'upload MiB/token':>17} {'copied':>8}",
    ]
    for r in results:
        lines.append(
            f"{r.budget_mib:>10} {str(r.starts):>6} {r.plan.n_slots_total:>7} {_rate(r.small):>8} {_rate(r.large):>8} "
            f"{r.uploaded_bytes_per_token() / 2**20:>17.2f} {r.copied_experts:>8}"
        )
    return "\n".join(lines)


def _knobs(pairs: Sequence[str]) -> dict[str, float]:
    knobs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            knobs[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise MoeModelError(f"--knob expects NAME=NUMBER, got {pair!r}")
    return knobs


def _run_policies(args, model: ModelSpec, work: Workload, results: list[SimResult]) -> list[dict]:
    """Each chosen policy on the same workload and budgets; the exact LRU reuses the simulation above."""
    from moe_model.policies import POLICIES, REFERENCE, get_policy, run_policy
    from moe_model.policies.lru import from_simulation

    names = list(POLICIES) if args.policy == "all" else [get_policy(args.policy).name]
    knobs = _knobs(args.knob)
    numeric = {k for n in names for k, v in POLICIES[n].knobs.items() if isinstance(v, (int, float))}
    if set(knobs) - numeric:
        raise MoeModelError(
            f"no chosen policy has the knob(s) {sorted(set(knobs) - numeric)}; numeric knobs: {sorted(numeric)}"
        )
    out = []
    for name in names:
        policy = POLICIES[name]
        mine = {k: v for k, v in knobs.items() if k in policy.knobs}
        if name == REFERENCE:
            runs = [from_simulation(r) for r in results]
        else:
            budgets = [r.budget_mib for r in results]
            runs = run_policy(name, model, work, budgets, placement_from_args(args), **mine)
        item = policy.describe() | {"knobs": {k: v for k, v in ({**policy.knobs, **mine}).items() if v is not None}}
        if name == "static-hot-set":
            item["notes"] = ["hot set chosen on the replayed workload itself (in-sample: flatters static pinning)"]
        out.append(item | {"budgets": [r.as_dict() for r in runs]})
    return out


def _format_policies(policies: list[dict]) -> str:
    lines = ["", "hit rate by policy:", f"{'budget MiB':>10} " + " ".join(f"{p['name']:>17}" for p in policies)]
    for i, b in enumerate(policies[0]["budgets"]):
        rates = [p["budgets"][i]["hit_rate"] for p in policies]
        lines.append(
            f"{b['budget_mib']:>10} " + " ".join("-".rjust(17) if h is None else f"{100 * h:16.2f}%" for h in rates)
        )
    lines.append("labels: " + ", ".join(f"{p['name']} {p['label']}" for p in policies))
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    from moe_model.llama.simulate import simulate_budgets  # numba: imported only by the commands that simulate

    model = load_model(args.model)
    work = _workload(args, model, whole=bool(args.export_workload or args.policy))
    if args.export_workload:
        save_npz(args.export_workload, work)
    results = simulate_budgets(model, work, _budget_list(args), placement_from_args(args))
    policies = _run_policies(args, model, work, results) if args.policy else None
    if args.json:
        out = {"model": model.name, "workload": work.label, "budgets": [r.as_dict() for r in results]}
        print(to_json(out | ({"policies": policies} if policies else {})))
    else:
        print(_format_sim(results, work) + (_format_policies(policies) if policies else ""))
    return 0


def _add_simulate(sub) -> None:
    sim = sub.add_parser("simulate", help="replay routing through llama.cpp's slot pools at one or many budgets")
    sim.add_argument("--model", required=True, help="GGUF path, header prefix, URL or first shard")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="routing trace: .npz (token trace or recorded llama.cpp trace) or .csv")
    source.add_argument("--synthetic", action="store_true", help="synthetic routing (a model; knobs below)")
    budgets = sim.add_mutually_exclusive_group(required=True)
    budgets.add_argument("--budget-mib", type=_BUDGET)
    budgets.add_argument("--budgets-mib", type=_floats, metavar="A,B,...")
    budgets.add_argument("--budget-range", type=_range, metavar="LO:HI:COUNT")
    _add_placement_args(sim)
    sim.add_argument("--concurrency", type=_CONCURRENCY, default=1, help="sequences decoding at once")
    sim.add_argument("--draft", type=_DRAFT, default=0, help="speculative draft tokens per verification")
    sim.add_argument("--accept", type=_FRACTION, default=0.7, help="draft acceptance rate")
    sim.add_argument(
        "--prompt-tokens", type=_ranged(int, 0, MAX_PROMPT_TOKENS), default=0, help="synthetic prompt per sequence"
    )
    sim.add_argument("--ubatch-size", type=_ranged(int, 1, MAX_UBATCH), default=512)
    sim.add_argument("--no-warmup", action="store_true", help="skip llama-server's 2-token warm-up")
    sim.add_argument(
        "--tokens", type=_ranged(int, 1, MAX_SYNTHETIC_TOKENS), default=20_000, help="synthetic decode tokens"
    )
    sim.add_argument("--skew", type=float, help="synthetic: spread of expert popularity")
    sim.add_argument("--working-set", type=float, help="synthetic: share of a layer's experts one sequence uses")
    sim.add_argument("--drift", type=float, help="synthetic: per-token chance the working set swaps an expert")
    sim.add_argument("--reuse", type=float, help="synthetic: chance a previous-token expert is picked again")
    sim.add_argument("--seed", type=_ranged(int, 0, 2**32 - 1), default=0)
    sim.add_argument(
        "--export-workload", metavar="FILE", help="also write the batched workload as NPZ (replayable; held in memory)"
    )
    sim.add_argument(
        "--policy",
        metavar="NAME",
        help="also replay with a replacement policy (or 'all'; held in memory): see docs/cli.md",
    )
    sim.add_argument(
        "--knob", action="append", default=[], metavar="NAME=VALUE", help="a policy knob, e.g. share=0.8 (repeatable)"
    )
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(func=cmd_simulate)


def _format_run(run: dict, check: list | None) -> str:
    m, p = run["model"], run["placement"]
    lines = [f"run {run['index'] + 1}: {run['program']}" + ("" if run["starts"] else " (did not start)")]
    if m:
        lines.append(
            f"  model: {m.get('name', '?')} ({m.get('architecture', '?')}, {m.get('file_type', '?')}), "
            f"{m.get('n_layer', '?')} layers, {m.get('n_expert', '?')} experts, {m.get('n_expert_used', '?')} used"
        )
    if p:
        lines.append(
            f"  placement: {p.get('offloaded_layers', '?')}/{p.get('total_layers', '?')} layers offloaded, "
            f"buffers {p.get('model_buffers_mib', {})}, parallel {p.get('n_seq_max', 1)}, ctx {p.get('n_ctx', '?')}"
        )
    lines += [
        f"  {d['name']} MoE cache {d['cache_mib']:.2f} MiB for {d['host_experts_mib']:.2f} MiB of host experts"
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


def cmd_parse_log(args: argparse.Namespace) -> int:
    from moe_model.readers.logs import parse_log
    from moe_model.speed.measurements import crosscheck, derive, point_from_run

    runs = parse_log(args.log)
    model = load_model(args.model) if args.model else None
    out = []
    for run in runs:
        item = run.as_dict()
        item["derived"] = vars(derive(run))
        item["measured_point"] = point_from_run(run, Path(args.log).name)
        if model is not None:
            budget, lines = crosscheck(run, model)
            item["crosscheck"] = {"budget_mib": budget, "lines": [vars(c) | {"ok": c.ok} for c in lines]}
        out.append(item)
    if args.json:
        print(to_json({"runs": out}))
    else:
        print("\n\n".join(_format_run(r, r.get("crosscheck", {}).get("lines")) for r in out))
    return 0


def _named_preset(name: str):
    """The GPU preset a typed name resolves to; what it became goes to stderr unless the name was exact."""
    from moe_model.speed.hardware import preset_match

    match = preset_match(name)
    if match.how != "exact":
        print(f"note: {match.describe()}", file=sys.stderr)
    return match.hardware


def _hardware(args: argparse.Namespace):
    """The machine: a preset (or a machine file from `calibrate`) with the flags' edits; its relative error."""
    from moe_model.speed.calibration import default_time_model, load_machine

    if getattr(args, "machine", None):
        hw, rel_error = load_machine(args.machine)
    else:
        hw, rel_error = _named_preset(args.hardware), default_time_model().rel_error
    changes = {
        k: v
        for k, v in (
            ("vram_gib", args.vram_gib),
            ("gpu_bw_gbs", args.gpu_bw_gbs),
            ("pinned_gbs", args.pinned_gbs or args.link_gbs),
            ("pageable_gbs", args.pageable_gbs or args.link_gbs),
            ("cpu_bw_gbs", args.cpu_bw_gbs),
            ("cpu_threads", args.threads),
            ("ram_gib", args.ram_gib),
            ("pcie_gen", args.pcie_gen),
            ("pcie_lanes", args.pcie_lanes),
        )
        if v is not None
    }
    return (hw.with_changes(**changes) if changes else hw), rel_error


def _scenario(args: argparse.Namespace, placement: str = "cpu-moe", budget: int = 0):
    from moe_model.speed.scenario import Scenario

    multi_gpu = {"n_gpu_layers": args.n_gpu_layers, "tensor_split": args.tensor_split}
    multi_gpu["n_gpus"] = max(1, len(args.tensor_split))
    return Scenario(
        Placement.parse(placement, **multi_gpu),
        budget,
        args.concurrency,
        args.draft,
        args.accept,
        args.cpu_share,
        args.ctx,
        load_mode="none" if args.pinned else args.load_mode,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        fit_target_mib=args.fit_target_mib,
        prompt_tokens=args.prompt_tokens,
        n_ubatch=args.ubatch_size,
        offload_min_batch=args.offload_min_batch,
        policy=getattr(args, "policy", ""),  # predict only: recommend ranks what llama.cpp's flags can select
    )


def _workload_source(args: argparse.Namespace, model: ModelSpec):
    """A function giving the workload of a scenario: the user's trace or the model's synthetic preset.

    A trace is streamed for the exact LRU (never held whole, as `simulate` does); a policy other than it
    replays one whole Workload, so for those the trace is loaded, within the in-memory limits."""
    from functools import lru_cache

    from moe_model.policies import REFERENCE
    from moe_model.speed.measured import synthetic_workload
    from moe_model.speed.scenario import Scenario

    path = getattr(args, "trace", None)
    opened = lru_cache(maxsize=1)(lambda: open_trace(path))  # opened when a replay first needs it

    @lru_cache(maxsize=16)
    def batched(concurrency: int, draft: int, accept: float, whole: bool) -> Workload | WorkloadStream:
        if not path:
            return synthetic_workload(model, Scenario(concurrency=concurrency, draft_tokens=draft, accept_rate=accept))
        batching = Batching(concurrency, draft, accept)
        if whole:  # a stream is read again whole; a token trace open_trace already holds is reused
            held = load_any(path) if isinstance(opened(), WorkloadStream) else opened()
            return workload_from(held, batching, model.n_expert)
        return stream_from(opened(), batching, model.n_expert)

    return lambda sc: batched(sc.concurrency, sc.draft_tokens, sc.accept_rate, sc.policy_name != REFERENCE)


def _routing(args: argparse.Namespace, model: ModelSpec) -> tuple[float, str]:
    """The hit-rate spread (points) a prediction carries and what routing it used."""
    from moe_model.routing.synthetic import preset_for

    if getattr(args, "trace", None):
        return 0.0, f"the trace {args.trace}"
    preset = preset_for(model)
    return preset.spread_points, f"routing preset {preset.name} ({preset.match}; a model)"


def cmd_predict(args: argparse.Namespace) -> int:
    from moe_model.speed.calibration import default_time_model
    from moe_model.speed.curve import curve
    from moe_model.speed.time_model import verdict

    model, (hw, rel_error) = load_model(args.model), _hardware(args)
    time_model = default_time_model()
    spread, routing = _routing(args, model) if args.hit_rate is None else (0.0, f"hit rate {args.hit_rate} given")
    workload_for = _workload_source(args, model) if args.hit_rate is None else None
    both = curve(
        model,
        hw,
        time_model.params,
        _scenario(args, args.placement),
        sorted({args.budget_mib, 0}),
        workload_for,
        hit_rate=args.hit_rate,
        rel_error=rel_error,
        spread_points=spread,
    )
    pred, baseline = both.at(args.budget_mib).prediction, both.at(0).prediction
    cache_verdict = verdict(pred, baseline) if args.budget_mib else "no cache"
    out = pred.as_dict() | {
        "verdict": cache_verdict,
        "no_cache_decode_tps": baseline.decode_tps,
        "no_cache_decode_tps_range": list(baseline.decode_tps_range),
        "hardware": hw.as_dict(),
        "params": vars(time_model.params),
        "params_source": time_model.source,
        "rel_error": rel_error,
        "routing": routing,
        "traffic": routing,  # the field's old name, kept for scripts
        "hit_rate_spread_points": spread,
    }
    if args.json:
        print(to_json(out))
        return 0
    sc = pred.scenario
    print(
        f"{model.name} on {hw.name} ({hw.pcie_label}, {'pinned' if sc.pinned else 'mmap (pageable)'} host experts): "
        f"{pred.layout.placement.label}, --moe-cache-mib {sc.budget_mib}"
    )
    if not pred.starts:
        print(f"  does not start: {pred.error}")
        return 0
    if not pred.vram.fits:
        print(f"  does not fit: {-pred.vram.free_mib:.0f} MiB over the GPU's memory (no speed shown)")
        return 0
    lo, hi = pred.decode_tps_range
    print(
        f"  decode {pred.decode_tps:.1f} t/s (range {lo:.1f}-{hi:.1f}), prompt {pred.prefill_tps:.0f} t/s, hit rate "
        f"{'-' if pred.hit_rate is None else f'{100 * pred.hit_rate:.1f}%'} ({routing})"
    )
    if args.budget_mib:
        print(f"  the cache {cache_verdict} against no cache ({baseline.decode_tps:.1f} t/s)")
    print("  decode ms per ubatch: " + ", ".join(f"{k} {v:.2f}" for k, v in pred.breakdown_ms.items() if v))
    print("  VRAM MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in pred.vram.as_dict().items()))
    print(f"  time model: {time_model.source} (a model, not a measurement)")
    for note in pred.notes:
        print(f"  note: {note}")
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    from moe_model.speed.calibration import default_time_model
    from moe_model.speed.fit_advice import recommend_advice
    from moe_model.speed.recommend import recommend

    model, (hw, rel_error) = load_model(args.model), _hardware(args)
    time_model = default_time_model()
    spread, routing = _routing(args, model)
    options = recommend(
        model,
        hw,
        time_model.params,
        _scenario(args),
        _workload_source(args, model),
        args.model,
        rel_error=rel_error,
        spread_points=spread,
    )
    ranked = [o.as_dict() for o in options]
    best = ranked[0] if ranked and ranked[0]["usable"] else None
    margin = None
    if best and len(ranked) > 1 and ranked[1]["decode_tps"]:
        margin = best["decode_tps"] / ranked[1]["decode_tps"] - 1
    advice = recommend_advice(model, hw, options)
    if args.json:
        out = {"best": best, "margin": margin, "options": ranked, "params_source": time_model.source}
        out |= {"fits": advice.fits, "would_fit": [c.as_dict() for c in advice.would_fit], "summary": advice.summary}
        print(to_json(out | {"hardware": hw.as_dict(), "routing": routing, "rel_error": rel_error}))
    else:
        _print_recommendation(ranked, best, margin, advice)
        print(f"time model: {time_model.source}; routing: {routing} (a model, not a measurement)")
        print(f"summary: {advice.summary}")
    if not advice.fits:
        print(f"error: {advice.summary}", file=sys.stderr)
        return 1
    return 0


def _why_unusable(option: dict) -> str:
    if not option["starts"]:
        return "does not start"
    short = [what for what, ok in (("VRAM", option["fits_vram"]), ("RAM", option["fits_ram"])) if not ok]
    return f"does not fit {' or '.join(short)}"


def _print_recommendation(ranked: list[dict], best: dict | None, margin: float | None, advice) -> None:
    for o in ranked:
        lo, hi = o["decode_tps_range"]
        if o["usable"]:
            print(f"{o['decode_tps']:7.1f} t/s ({lo:.1f}-{hi:.1f}) {o['verdict']:>17}  {o['label']}")
        else:  # no speed for what cannot run, as predict shows none
            print(f"{'-':>7} t/s  {o['label']}  ({_why_unusable(o)})")
    if best:
        print(
            f"\nbest: {best['label']}, {best['decode_tps']:.1f} t/s predicted"
            + (f" ({100 * margin:.0f} % ahead of the next)" if margin is not None else "")
        )
        print(f"  {best['command']}")
    if advice.would_fit:
        print("\nwhat would fit (the smallest change of each kind):")
        print("\n".join(f"  {c.text}" for c in advice.would_fit))


def cmd_calibrate(args: argparse.Namespace) -> int:
    from moe_model.readers.logs import parse_log
    from moe_model.speed.calibration import calibrate_machine, default_time_model, save_machine
    from moe_model.speed.measured import log_points

    model, hw = load_model(args.model), _named_preset(args.hardware)
    points = []
    for path in args.logs:
        points += log_points(parse_log(path), model, hw, Path(path).name, hw.name)
    result = calibrate_machine(points, hw, default_time_model().params)
    if args.json:
        print(to_json(result.as_dict()))
    else:
        print(f"{hw.name}: fitted {', '.join(result.fitted)} on {len(result.fit_errors)} runs")
        for name, err in result.fit_errors.items():
            note = "" if name in result.judged else "   (alone pins a term: not judged)"
            print(f"  {name:32} fit {100 * err:+6.1f} %   left out {100 * result.left_out_errors[name]:+6.1f} %{note}")
        print(f"  {result.reason}")
    if not result.accepted:
        print(f"error: calibration refused: {result.reason}", file=sys.stderr)
        return 1
    save_machine(result, args.output)
    if not args.json:
        print(f"  wrote {args.output}: use it with predict/recommend --machine {args.output}")
    return 0


def _add_hardware_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    machine = parser.add_mutually_exclusive_group(required=True)
    machine.add_argument("--hardware", help="GPU preset as you would type it: 't4', '4090', 'rtx 4080', 'h200'")
    machine.add_argument("--machine", help="a machine file written by `calibrate`")
    parser.add_argument("--vram-gib", type=_ranged(float, 0.001, MAX_VRAM_GIB))
    parser.add_argument("--gpu-bw-gbs", type=_RATE)
    parser.add_argument("--pcie-gen", type=_ranged(int, 3, 5))
    parser.add_argument("--pcie-lanes", type=_ranged(int, 1, 16))
    parser.add_argument("--pinned-gbs", type=_RATE, help="measured host-to-device rate from pinned memory")
    parser.add_argument("--pageable-gbs", type=_RATE, help="measured host-to-device rate from mmap'd memory")
    parser.add_argument("--link-gbs", type=_RATE, help="one measured host-to-device rate for both")
    parser.add_argument("--cpu-bw-gbs", type=_RATE, help="host memory bandwidth")
    parser.add_argument("--threads", type=_ranged(int, 1, 1024), help="threads for host experts (-t)")
    parser.add_argument("--ram-gib", type=_ranged(float, 1, 16384), help="host RAM (default: the preset's)")
    parser.add_argument("--load-mode", choices=("mmap", "none", "mlock", "dio"), default="mmap")
    parser.add_argument("--pinned", action="store_true", help="same as --load-mode none (pinned host experts)")
    parser.add_argument("-ctk", "--cache-type-k", default="f16", choices=KV_TYPES)
    parser.add_argument("-ctv", "--cache-type-v", default="f16", choices=KV_TYPES)
    parser.add_argument("--fit-target-mib", type=_ranged(float, 0, MAX_VRAM_GIB * 1024), default=1024.0)
    parser.add_argument("--concurrency", type=_CONCURRENCY, default=1)
    parser.add_argument("--draft", type=_DRAFT, default=0)
    parser.add_argument("--accept", type=_FRACTION, default=0.7)
    parser.add_argument("--cpu-share", type=_FRACTION, default=0.0)
    parser.add_argument("--ctx", type=_ranged(int, 1, MAX_CTX), default=4096)
    parser.add_argument("--n-gpu-layers", "-ngl", type=int, default=-1, metavar="N")
    parser.add_argument("--tensor-split", "-ts", type=_split, default=(), metavar="A,B,...")
    parser.add_argument("--ubatch-size", "-ub", type=_ranged(int, 1, MAX_UBATCH), default=512)
    parser.add_argument("--prompt-tokens", type=_ranged(int, 1, MAX_PROMPT_TOKENS), default=512)
    parser.add_argument(
        "--offload-min-batch", type=_ranged(int, 1, MAX_UBATCH), default=32, help="GGML_OP_OFFLOAD_MIN_BATCH"
    )
    parser.add_argument("--json", action="store_true")


def _add_calibrate(sub) -> None:
    cal = sub.add_parser("calibrate", help="fit this machine's own terms from its llama-server -lv 4 logs")
    cal.add_argument("logs", nargs="+", metavar="LOG")
    cal.add_argument("--model", required=True, help="GGUF header of the model the logs ran")
    cal.add_argument("--hardware", required=True, help="the GPU preset to start from")
    cal.add_argument("-o", "--output", default="machine.json", help="machine file to write")
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(func=cmd_calibrate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m moe_model", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="what --moe-cache-mib N buys for a GGUF model, as llama.cpp computes it")
    plan.add_argument("source", help="GGUF path, header prefix file, http(s) URL, or first shard")
    plan.add_argument("--budget-mib", type=_BUDGET, required=True, help="--moe-cache-mib value")
    _add_placement_args(plan)
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)
    _add_simulate(sub)
    logs = sub.add_parser("parse-log", help="what the cache did, from a llama-server / llama-cli -lv 4 log")
    logs.add_argument("log")
    logs.add_argument("--model", help="GGUF header to cross-check the logged slots against")
    logs.add_argument("--json", action="store_true")
    logs.set_defaults(func=cmd_parse_log)
    pred = sub.add_parser("predict", help="decode and prompt tokens/s and VRAM for one configuration (a model)")
    _add_hardware_args(pred)
    pred.add_argument("--placement", default="cpu-moe", help="cpu-moe | fit | n-cpu-moe:K | gpu")
    pred.add_argument("--budget-mib", type=_BUDGET, default=0)
    pred.add_argument(
        "--policy",
        default="",
        metavar="NAME",
        help="price another replacement policy's counts (what-if; see docs/cli.md)",
    )
    source = pred.add_mutually_exclusive_group()
    source.add_argument("--hit-rate", type=_FRACTION, help="assume this hit rate (0..1) instead of simulating")
    source.add_argument("--trace", help="routing trace to simulate")
    source.add_argument("--synthetic", action="store_true", help="the model's synthetic preset (default)")
    pred.set_defaults(func=cmd_predict)
    rec = sub.add_parser("recommend", help="rank --fit, --cpu-moe + budgets, --n-cpu-moe K, CPU shares")
    _add_hardware_args(rec)
    rec.add_argument("--trace", help="routing trace to simulate (default: the model's synthetic preset)")
    rec.set_defaults(func=cmd_recommend)
    _add_calibrate(sub)
    return parser


SIMULATING_COMMANDS = ("simulate", "predict", "recommend", "calibrate")  # the commands that run numba kernels


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if args.command in SIMULATING_COMMANDS:
            from moe_model.warmup import ensure_compiled

            ensure_compiled(lambda line: print(line, file=sys.stderr, flush=True))
        return func(args)
    except MoeModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {err.strerror or err}: {getattr(err, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except Exception as err:  # one line, no traceback (MOE_MODEL_DEBUG=1 shows it)
        if os.environ.get("MOE_MODEL_DEBUG"):
            raise
        print(f"error: unexpected {type(err).__name__}: {err}", file=sys.stderr)
        return 1
