"""`predict`, `recommend` and `calibrate`: speeds from the time model (a model, not a measurement) on a machine."""

from __future__ import annotations

import argparse
import sys

from moe_model.cli.args import (
    BUILD_FOR_UNLOGGED,
    HARDWARE,
    PLACEMENT,
    SCENARIO,
    add_knobs,
    add_max_lookups,
    add_setting,
    add_settings,
    number,
    ranged,
    scenario_from_args,
    trace_cap,
)
from moe_model.cli.output import to_json
from moe_model.limits import MAX_RATE_GBS
from moe_model.llama.batching import server_batching, stream_from, workload_from
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.traces import load_any, open_trace
from moe_model.speed.hardware import MIN_RATE
from moe_model.speed.host_memory import whole_gib
from moe_model.speed.host_parts import PART_INPUTS, described
from moe_model.speed.server_command import command_line, read_command
from moe_model.speed.streams import speed_note, total_over_streams
from moe_model.speed.term_words import term_words
from moe_model.threads import cache_once
from moe_model.workload import Workload, WorkloadStream


def _named_preset(name: str):
    """The GPU preset a typed name resolves to; what it became goes to stderr unless the name was exact."""
    from moe_model.speed.hardware import preset_match

    match = preset_match(name)
    if match.how != "exact":
        print(f"note: {match.describe()}", file=sys.stderr)
    return match.hardware


def _hardware(args: argparse.Namespace):
    """The machine: a preset (or a machine file from `calibrate`) with the flags' edits; its relative error.
    Also settles the load mode: the flag's, else the one a machine file was calibrated with, else mmap."""
    from moe_model.fits.calibration import default_time_model
    from moe_model.fits.machine_fit import load_machine

    flag_mode = args.load_mode  # None unless --load-mode or --pinned was given
    if getattr(args, "machine", None):
        machine = load_machine(args.machine)
        hw, rel_error = machine.hardware, machine.rel_error_at(args.concurrency)
        args.load_mode = flag_mode or machine.load_mode
        args.load_mode_source = "flag" if flag_mode else f"recorded in {args.machine} (--load-mode overrides it)"
        args.policy_reading = machine.class_lru_reading  # its logs' ClassLRU reading: replayed alone, no band
    else:
        hw, rel_error = _named_preset(args.hardware), default_time_model().rel_error
        args.load_mode = flag_mode or SCENARIO["load_mode"].default
        args.load_mode_source = "flag" if flag_mode else "default"
    hw = _described(hw, args)
    changes = {name: getattr(args, name) for name in HARDWARE if getattr(args, name) is not None}
    if (args.mem_channels or args.mem_mts) and args.mem_bw_gbs is None:
        changes["mem_bw_gbs"] = None  # the bandwidth follows the channels and speed given, not the preset's figure
    hw = hw.with_changes(**changes) if changes else hw
    if args.link_gbs is not None:  # the app's rule (Hardware.with_link_gbs); --pinned-gbs / --pageable-gbs win
        measured = {name: changes[name] for name in ("pinned_gbs", "pageable_gbs") if name in changes}
        hw = hw.with_link_gbs(args.link_gbs).with_changes(**measured)
    return hw, rel_error


def _described(hw, args: argparse.Namespace):
    """The machine with the host parts typed as people know them (CPU model, RAM kit, slot, drive); the figure
    flags (--threads, --mem-mts, ...) are applied after, so a typed figure wins over the part's."""
    return described(hw, cpu_model=args.cpu, ram_kit=args.ram_kit, slot=args.slot, drive=args.drive)


def _workload_source(args: argparse.Namespace, model: ModelSpec):
    """A function giving the workload of a scenario: the user's trace or the model's synthetic preset.

    A trace is streamed for the exact LRU (never held whole, as `simulate` does); a policy other than it
    replays one whole Workload, so for those the trace is loaded, within the in-memory limits."""
    from moe_model.pricing.workloads import SyntheticSource, workload_scenario

    path = getattr(args, "trace", None)
    synthetic = SyntheticSource(model)  # one trace, batched once per batching
    opened = cache_once(lambda: open_trace(path, cap=trace_cap(args)))  # opened when a replay needs it

    @cache_once  # once, whichever of recommend's threads asks first (the others wait for it)
    def batched(sc, whole: bool) -> Workload | WorkloadStream:
        """`sc`: workload_scenario's (the key the app's workloads share)."""
        if not path:
            return synthetic(sc)
        batching = server_batching(model.architecture, sc.build, **sc.request.batching_fields)
        if whole:  # a stream is read again whole; a token trace open_trace already holds is reused
            held = load_any(path) if isinstance(opened(), WorkloadStream) else opened()
            return workload_from(held, batching, model.n_expert)
        return stream_from(opened(), batching, model.n_expert)

    # `whole` matters only for a trace: the synthetic workload is held whole anyway, so it is built once
    return lambda sc: batched(workload_scenario(sc), bool(path) and sc.kernel() is None)


def _host_run(args: argparse.Namespace, model: ModelSpec, hw, rel_error: float):
    """The machine with the user's CPU run applied (--host: a host record or llama-bench output of a CPU-only run
    of this model), the time model's error it carries (a machine file's own where given, else the error left out
    of a fit with a host record), and what was read (None without --host)."""
    if not getattr(args, "host", None):
        return hw, rel_error, None
    from moe_model.fits.host_fit import apply_host_record, host_time_model
    from moe_model.readers.llama_bench import read_host_input, with_header_types

    given = read_host_input(args.host)
    rel_error = rel_error if getattr(args, "machine", None) else host_time_model().rel_error
    return apply_host_record(hw, with_header_types(given.record, model), model), rel_error, given


def _basis(args: argparse.Namespace, sc, hw, rel_error: float, prefill_rel_error: float):
    """How each number is known (answers.basis), from where the routing and the machine came from."""
    from moe_model.answers.basis import GIVEN, SYNTHETIC, TRACE, prediction_basis

    routing = GIVEN if getattr(args, "hit_rate", None) is not None else TRACE if args.trace else SYNTHETIC
    calibrated = bool(getattr(args, "machine", None))
    return prediction_basis(
        routing, sc, hw, machine_calibrated=calibrated, rel_error=rel_error, prefill_rel_error=prefill_rel_error
    )


def _host_run_fields(given) -> dict:
    """The JSON's `host_run`: the CPU run's own speeds (measured) and which file it was; None without --host."""
    from moe_model.answers.basis import host_run_basis

    return {"host_run": host_run_basis(given.record) | {"kind": given.kind} if given else None}


def _routing(args: argparse.Namespace, model: ModelSpec) -> tuple[float, str]:
    """The hit-rate spread (points) a prediction carries and what routing it used."""
    from moe_model.routing.synthetic import preset_for

    if getattr(args, "trace", None):
        return 0.0, f"the trace {args.trace}"
    preset = preset_for(model)
    return preset.spread_points, f"routing preset {preset.name} ({preset.match}; a model)"


def _nearest(row, model_name: str) -> dict | None:
    """The JSON's `nearest_measured`: the cited row nearest the prediction (answers.nearest_row), or None."""
    return row.as_dict(model_name) if row else None


def _vram_line(vram) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in vram.as_dict().items())


def cmd_predict(args: argparse.Namespace) -> int:
    from moe_model.answers.fit_advice import run_state
    from moe_model.answers.known_problems import known_problems
    from moe_model.answers.nearest_row import nearest_row
    from moe_model.answers.usability import usability
    from moe_model.answers.verdict import cache_verdict
    from moe_model.fits.calibration import default_time_model
    from moe_model.pricing.curve import curve
    from moe_model.speed.range_inputs import RangeInputs

    model, (hw, rel_error) = load_model(args.model), _hardware(args)
    hw, rel_error, given = _host_run(args, model, hw, rel_error)
    time_model = default_time_model()
    spread, routing = _routing(args, model) if args.hit_rate is None else (0.0, f"hit rate {args.hit_rate} given")
    workload_for = _workload_source(args, model) if args.hit_rate is None else None
    both = curve(
        model,
        hw,
        time_model.params,
        _scenario(args),
        sorted({args.budget_mib, 0}),
        workload_for,
        RangeInputs(rel_error, spread),
        hit_rate=args.hit_rate,
    )
    pred, baseline = both.at(args.budget_mib).prediction, both.at(0).prediction
    said = cache_verdict(pred, baseline)
    host = pred.layout.ram
    problems = known_problems(model, pred.scenario, pred.layout)
    basis = _basis(args, pred.scenario, hw, rel_error, time_model.prefill_rel_error)
    out = (
        pred.as_dict()
        | {
            "known_problems": problems,
            "state": run_state(pred, host),
            **said.as_dict(),
            "no_cache_decode_tps": baseline.decode_tps,
            "no_cache_decode_tps_range": list(baseline.decode_tps_range),
            "hardware": hw.as_dict(),
            "params": vars(time_model.params),
            "params_source": time_model.source,
            "rel_error": rel_error,
            "routing": routing,
            "traffic": routing,  # the field's old name, kept for scripts
            "hit_rate_spread_points": spread,
            "load_mode": args.load_mode,
            "load_mode_source": args.load_mode_source,
            "basis": basis.as_dict(),
            "command": command_line(args.model, pred.scenario, pred.layout.placement),
            "nearest_measured": _nearest(nearest_row(model.name, pred.scenario, hw), model.name),
        }
        | (usability(pred).as_dict() if pred.usable and host.runs else {"usability": None, "usability_line": None})
        | _host_run_fields(given)
    )
    if args.json:
        print(to_json(out))
        return 0
    sc = pred.scenario
    print(
        f"{model.name} on {hw.name} ({hw.pcie_label}, {'pinned' if sc.pinned else 'mmap (pageable)'} host experts): "
        f"{pred.layout.placement.label}, --moe-cache-mib {sc.budget_mib}"
    )
    if args.load_mode_source != "default":
        print(f"  load mode {args.load_mode}: {args.load_mode_source}")
    if given:
        print(f"  {given.described}")
    for problem in problems:
        print(f"  known problem: {problem}")
    print(f"  {out['state']} [modelled]")
    if not pred.usable or not host.runs:
        return 0
    if pred.vram.tight:
        print(f"  {pred.vram.verdict}")
    print(f"  {out['usability_line']}")
    lo, hi = pred.decode_tps_range
    print(
        f"  decode {pred.decode_tps:.1f} t/s (range {lo:.1f}-{hi:.1f}){speed_note(pred.decode_tps, sc.concurrency)} "
        f"{basis.tag('decode_tps')} at {sc.context_depth:,} tokens of context, "
        f"hit rate {'-' if pred.hit_rate is None else f'{100 * pred.hit_rate:.1f}%'} {basis.tag('hit_rate')} "
        f"({routing})"
    )
    if out["nearest_measured"]:
        print(f"  {out['nearest_measured']['sentence']}")
    for source in pred.range_sources:
        print(f"    range from {source.source}: {source.low_tps:.1f}-{source.high_tps:.1f} t/s [modelled]")
    if step := out["range_step"]:
        print(f"  {step} [modelled]")
    print(
        f"  prompt of {sc.prompt_tokens:,} tokens: {pred.prefill_tps:.0f} t/s, first token after {pred.ttft_s:.2f} s "
        f"{basis.tag('prefill_tps')} (steady state: the requests after the server's first)"
    )
    first = pred.first_request
    if first and (first.cold_fills or abs(first.prefill_tps / pred.prefill_tps - 1) > 0.01):
        low, high = first.decode_tps_range
        print(
            f"  first request after start: decode {first.decode_tps:.1f} t/s (range {low:.1f}-{high:.1f})"
            f"{speed_note(first.decode_tps, sc.concurrency)} over {sc.n_predict} tokens "
            f"({first.cold_fills:.0f} experts uploaded into empty slots), prompt {first.prefill_tps:.0f} t/s, "
            f"first token after {first.ttft_s:.2f} s [modelled]; not counted: {first.excludes}"
        )
    if args.budget_mib:
        print(f"  {said.sentence} [modelled]")
    terms = ", ".join(f"{term_words(k)} {v:.2f}" for k, v in pred.breakdown_ms.items() if v)
    print(f"  decode ms per ubatch [modelled]: {terms}")
    print("  VRAM MiB [modelled; the cache's slots replayed]: " + _vram_line(pred.vram))
    ram = pred.layout.ram
    print(
        f"  RAM MiB [modelled]: experts {ram.experts_mib:.0f}, other {ram.other_mib:.0f}, kv_cache {ram.kv_mib:.0f}, "
        f"reserve_assumed {ram.reserve_mib:.0f}, total {ram.ram_mib:.0f} "
        f"({ram.state if ram.ram_stated else 'RAM not stated: priced as if it fits'})"
    )
    print(f"  {sc.hit_rate_wording.line}")
    print(f"  {basis.line}")
    print(f"  time model: {time_model.source} (a model, not a measurement)")
    for note in pred.notes:
        print(f"  note: {note}")
    print(f"  llama-server command: {out['command']}")
    return 0


def _scenario(args: argparse.Namespace):
    """The flags' Scenario; with --server-command, that command's (speed/server_command.py): its server flags win,
    the flags here give the request (prompt, depth, tokens generated, acceptance, build, policy)."""
    sc = scenario_from_args(args)
    if getattr(args, "server_command", None):
        sc = read_command(args.server_command, sc).scenario
        args.budget_mib, args.load_mode, args.load_mode_source = sc.budget_mib, sc.load_mode, "the server command"
    return sc


def cmd_recommend(args: argparse.Namespace) -> int:
    from moe_model.answers.fit_advice import recommend_advice
    from moe_model.answers.recommend import recommend
    from moe_model.fits.calibration import default_time_model
    from moe_model.speed.range_inputs import RangeInputs

    model, (hw, rel_error) = load_model(args.model), _hardware(args)
    hw, rel_error, given = _host_run(args, model, hw, rel_error)
    time_model = default_time_model()
    spread, routing = _routing(args, model)
    basis = _basis(args, scenario_from_args(args), hw, rel_error, time_model.prefill_rel_error)
    options = recommend(
        model,
        hw,
        time_model.params,
        scenario_from_args(args),
        _workload_source(args, model),
        args.model,
        RangeInputs(rel_error, spread),
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
        mode = {"load_mode": args.load_mode, "load_mode_source": args.load_mode_source}
        mode |= scenario_from_args(args).policy_fields()
        out |= {"hardware": hw.as_dict(), "routing": routing, "rel_error": rel_error, "basis": basis.as_dict()}
        print(to_json(out | mode | _host_run_fields(given)))
    else:
        if args.load_mode_source != "default":
            print(f"load mode {args.load_mode} for --fit and --n-cpu-moe: {args.load_mode_source}")
        if given:
            print(given.described)
        _print_recommendation(ranked, best, margin, advice)
        print(f"time model: {time_model.source} (a model); routing: {routing}")
        sc = scenario_from_args(args)
        print(sc.hit_rate_wording.line)
        print(basis.line)
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
    streams = ranked[0]["scenario"]["concurrency"] if ranked else 1
    if streams > 1:
        print(f"decode t/s: {total_over_streams(streams)}")
    for o in ranked:
        lo, hi = o["decode_tps_range"]
        if o["usable"]:
            disk = f"  (streams from disk: {whole_gib(o['ram_needed_mib'])} GiB of RAM would end it)"
            print(
                f"{o['decode_tps']:7.1f} t/s ({lo:.1f}-{hi:.1f}) {o['verdict']:>17}  {o['label']}"
                + (disk if o["streams_from_disk"] else "")
            )
        else:  # no speed for what cannot run, as predict shows none
            print(f"{'-':>7} t/s  {o['label']}  ({_why_unusable(o)})")
    if best:
        print(
            f"\nbest: {best['label']}, {best['decode_tps']:.1f} t/s predicted"
            + speed_note(best["decode_tps"], streams)
            + (f" ({100 * margin:.0f} % ahead of the next)" if margin is not None else "")
        )
        print(f"  {best['usability_line']}")
        print(f"  {best['verdict_line']}")
        print(f"  {best['command']}")
    if advice.would_fit:
        print("\nwhat would fit (the smallest change of each kind):")
        print("\n".join(f"  {c.text}" for c in advice.would_fit))


def cmd_calibrate(args: argparse.Namespace) -> int:
    from moe_model.answers.before_calibration import before_calibration, time_model_before
    from moe_model.fits.calibration import default_time_model
    from moe_model.fits.host_fit import HOST_SETTLED
    from moe_model.fits.machine_fit import calibrate_logs, parse_logs, save_machine

    model, hw = load_model(args.model), _named_preset(args.hardware)
    hw, _, given = _host_run(args, model, hw, 0.0)  # the host record's CPU rate, threads, RAM and drive
    held = HOST_SETTLED if given else ()
    logs = parse_logs(args.logs)
    result = calibrate_logs(logs, model, hw, default_time_model().params, args.build, held)
    before = before_calibration(logs, model, hw, time_model_before(bool(given)), args.build)
    if args.json:
        print(to_json(result.as_dict() | _host_run_fields(given) | {"before_calibration": before.as_dict()}))
    else:
        if given:
            print(given.described)
        _print_calibration(result, hw, model)
        _print_before(before)
    if not result.accepted:
        print(f"error: calibration refused: {result.reason}", file=sys.stderr)
        return 1
    save_machine(result, args.output)
    if not args.json:
        print(f"  wrote {args.output}: use it with predict/recommend --machine {args.output}")
    return 0


def _print_calibration(result, hw, model) -> None:
    built = f"{result.engine} build {result.build}" if result.build else f"{result.engine}, build not logged"
    print(
        f"{hw.name} ({result.gpu or 'GPU not logged'}), {result.model or model.name}, {built}, load mode "
        f"{result.load_mode}: fitted {result.fitted_words} on {len(result.fit_errors)} runs"
    )
    width = max(map(len, result.fit_errors))
    for run in result.runs:
        notes = [f"{run.concurrency} streams"] if run.concurrency > 1 else []
        notes += ["first request after start"] if run.first_request else []
        notes += [] if run.name in result.judged else ["not judged"]
        print(
            f"  {run.name:{width}} fit {100 * result.fit_errors[run.name]:+6.1f} %   left out "
            f"{100 * result.left_out_errors[run.name]:+6.1f} %   ({', '.join(notes) or 'steady state'})"
        )
    if result.held:
        hw_fit = result.hardware
        print(
            f"  held from the host record (measured, not fitted): CPU expert rate {hw_fit.cpu_expert_gbs:,.1f} GB/s "
            f"at {hw_fit.cpu_expert_threads} threads; the logs fitted the rest"
        )
    print(f"  {result.request_note}")
    print(f"  {result.reason}")
    if pick := result.class_lru:
        reading = ", ".join(f"{k} {v}" for k, v in pick["reading"].items())
        print(f"  ClassLRU reading nearest the logged hit rates: {reading} ({pick['rms_points']:.1f} points RMS)")


def _print_before(before) -> None:
    """Each run beside the range predicted for its settings before this calibration, and how many fell inside."""
    print("  before calibration, each run's decode beside the range predicted for its settings with:")
    print(f"    {before.predicted_with}")
    width = max((len(r.name) for r in before.runs), default=0)
    for r in before.runs:
        d = r.decode
        print(
            f"    {r.name:{width}} {d.measured_tps:8.1f} t/s, predicted {d.predicted_tps:.1f} ({d.low_tps:.1f}-"
            f"{d.high_tps:.1f}), {r.request}: {d.words}"
        )
    for skipped in before.not_checked:
        print(f"    not checked: {skipped.name}: {skipped.why}")
    print(f"  {before.summary}")


# the scenario flags of predict and recommend (predict adds the placement, the budget and --policy)
SCENARIO_FLAGS = (
    "concurrency",
    "draft_tokens",
    "accept_rate",
    "n_ctx",
    "prompt_tokens",
    "n_ubatch",
    "load_mode",
    "cache_type_k",
    "cache_type_v",
    "fit_target_mib",
    "offload_min_batch",
    "depth",
    "flash_attn",
    "no_kv_offload",
    "n_predict",
    "build",
)


def _add_hardware_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    machine = parser.add_mutually_exclusive_group(required=True)
    machine.add_argument("--hardware", help="GPU preset as you would type it: 't4', '4090', 'rtx 4080', 'h200'")
    machine.add_argument("--machine", help="a machine file written by `calibrate`")
    for name in HARDWARE:  # each edits the preset's value, which it defaults to
        add_setting(parser, HARDWARE[name], default=None)
    parser.add_argument("--link-gbs", type=ranged(number, MIN_RATE, MAX_RATE_GBS), help="both measured rates at once")
    host = parser.add_argument_group("the host as you know it (each narrows the range; figure flags override)")
    for part in PART_INPUTS.values():  # --cpu, --ram-kit, --slot, --drive: declared once with the app's boxes
        host.add_argument(part.flag, help=part.help)
    host.add_argument(
        "--host",
        metavar="HOST.json",
        help="your CPU run of this model: a host record (record --host-out) or llama-bench -ngl 0's output "
        "(markdown, -o json or -o jsonl); calibrates the host side",
    )
    add_settings(parser, SCENARIO, tuple(f for f in SCENARIO_FLAGS if f != "load_mode"))
    add_setting(parser, SCENARIO["load_mode"], default=None, help="default: a machine file's own, else mmap")
    add_settings(parser, PLACEMENT, ("n_gpu_layers", "tensor_split"))
    add_knobs(parser)
    parser.add_argument("--json", action="store_true")


def add_parsers(sub) -> None:
    pred = sub.add_parser("predict", help="decode and prompt tokens/s and VRAM for one configuration (a model)")
    _add_hardware_args(pred)
    add_setting(pred, SCENARIO["placement"], default=SCENARIO["placement"].default.text)
    add_settings(pred, SCENARIO, ("budget_mib", "policy"))
    source = pred.add_mutually_exclusive_group()
    source.add_argument(
        "--hit-rate", type=ranged(number, 0.0, 1.0), help="assume this hit rate (0..1) instead of simulating"
    )
    source.add_argument("--trace", help="routing trace to simulate")
    source.add_argument("--synthetic", action="store_true", help="the model's synthetic preset (default)")
    pred.add_argument(
        "--server-command",
        metavar="'llama-server ...'",
        help="price this llama-server command (recommend's, or yours): its placement, cache, context, batch, KV and "
        "attention flags win over the flags here, which give the request (prompt, depth, tokens, build)",
    )
    add_max_lookups(pred)
    pred.set_defaults(func=cmd_predict)
    rec = sub.add_parser("recommend", help="rank --fit, --cpu-moe + budgets, --n-cpu-moe K, CPU shares")
    _add_hardware_args(rec)
    rec.add_argument("--trace", help="routing trace to simulate (default: the model's synthetic preset)")
    add_max_lookups(rec)
    rec.set_defaults(func=cmd_recommend)


def add_calibrate(sub) -> None:
    cal = sub.add_parser("calibrate", help="fit this machine's own terms from its llama-server -lv 4 logs")
    cal.add_argument("logs", nargs="+", metavar="LOG")
    cal.add_argument("--model", required=True, help="GGUF header of the model the logs ran")
    cal.add_argument("--hardware", required=True, help="the GPU preset to start from")
    cal.add_argument("-o", "--output", default="machine.json", help="machine file to write")
    cal.add_argument(
        "--host",
        metavar="HOST.json",
        help="your CPU run of this model (a host record, or llama-bench -ngl 0's output): its CPU expert rate, "
        "threads, RAM and drive are held and the logs fit the rest",
    )
    add_setting(cal, SCENARIO["build"], default=None, help=BUILD_FOR_UNLOGGED)
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(func=cmd_calibrate)
