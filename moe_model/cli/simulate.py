"""`simulate`: replay routing through llama.cpp's slot pools at one or many budgets (exact), and other policies."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import numpy as np

from moe_model.atomic import write_atomic
from moe_model.cli.args import (
    BATCHING,
    SCENARIO,
    add_knobs,
    add_max_lookups,
    add_placement,
    add_setting,
    add_settings,
    budget_range,
    placement_without_machine,
    ranged,
    trace_cap,
    whole,
    wholes,
)
from moe_model.cli.output import format_policies, format_sim, to_json
from moe_model.errors import MoeModelError
from moe_model.limits import MAX_BUDGET_MIB, MAX_BUDGETS, MAX_SYNTHETIC_TOKENS
from moe_model.llama.batching import stream_from, workload_from
from moe_model.llama.builds import check_cache_flags
from moe_model.llama.output_rows import last_layer_prunes
from moe_model.llama.server_warm_up import WARM_UP_TOKENS, start_up_probe
from moe_model.policies.knobs import parse_knobs
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.traces import load_trace, open_trace, save_npz
from moe_model.workload import Batching, Workload, WorkloadStream

if TYPE_CHECKING:
    from moe_model.llama.simulate import SimResult
    from moe_model.policies import Policy


def _budget_list(args: argparse.Namespace) -> list[int]:
    if args.budget_mib is not None:
        budgets = [args.budget_mib]
    elif args.budgets_mib is not None:
        budgets = list(args.budgets_mib)
    else:
        lo, hi, count = args.budget_range
        budgets = sorted({int(round(x)) for x in np.linspace(lo, hi, int(count))})
    if not budgets or len(budgets) > MAX_BUDGETS or min(budgets) < 0 or max(budgets) > MAX_BUDGET_MIB:
        raise MoeModelError(f"give 1..{MAX_BUDGETS} budgets of 0..{MAX_BUDGET_MIB:,} MiB")
    return budgets


def _workload(args: argparse.Namespace, model: ModelSpec, whole: bool) -> Workload | WorkloadStream:
    """The routing to replay: streamed chunk by chunk, or held `whole` (exporting it, replaying other policies)."""
    from moe_model.routing.synthetic import Knobs, Shape, generate, preset_for  # imported here: `plan` starts in < 1 s

    batching = Batching(
        args.concurrency,
        args.draft_tokens,
        args.accept_rate,
        args.prompt_tokens,
        args.n_ubatch,
        not args.no_warmup,
        args.seed,
        last_layer_prunes(model.architecture, args.build),
        start_up_probe(args.build),
    )
    if args.trace:
        if whole:
            return workload_from(load_trace(args.trace, cap=trace_cap(args)), batching, model.n_expert)
        return stream_from(open_trace(args.trace, cap=trace_cap(args)), batching, model.n_expert)
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


def _simulate_with_policies(
    args, model: ModelSpec, work: Workload, budgets: list[int], main: Policy
) -> tuple[list[SimResult], list[dict]]:
    """The build's own simulation and each chosen policy on the same workload and budgets (compare runs them)."""
    from moe_model.answers.policy_compare import compare
    from moe_model.policies import POLICIES, get_policy

    names = list(POLICIES) if args.policy == "all" else [get_policy(args.policy).name]
    knobs = parse_knobs(args.knob)
    known = {k for n in names for k in POLICIES[n].knobs}
    if set(knobs) - known:
        raise MoeModelError(f"no chosen policy has the knob(s) {sorted(set(knobs) - known)}; knobs: {sorted(known)}")

    mine = {n: POLICIES[n].own_knobs(knobs.items()) for n in names}
    runs = compare(model, work, budgets, placement_without_machine(args), names, mine, build_policy=main.name)
    out = []
    for name in names:
        policy = POLICIES[name]
        item = policy.describe() | {
            "knobs": {k: v for k, v in ({**policy.knobs, **mine[name]}).items() if v is not None}
        }
        item |= {"notes": list(notes)} if (notes := policy.notes(model)) else {}
        out.append(item | {"budgets": [r.as_dict() for r in runs.results[name]]})
    return list(runs.simulation), out


def cmd_simulate(args: argparse.Namespace) -> int:
    from moe_model.llama.simulate import simulate_budgets  # numba: imported only by the commands that simulate
    from moe_model.policies import EXACT, get_policy, policy_for_build
    from moe_model.policies.wording import hit_rate_wording

    budgets = _budget_list(args)
    check_cache_flags(args.build, max(budgets), 0.0)
    main = get_policy(policy_for_build(args.build))
    model = load_model(args.model)
    work = _workload(args, model, whole=bool(args.export_workload or args.policy))
    if args.export_workload:
        write_atomic(args.export_workload, lambda f: save_npz(f, work))
    if args.knob and not args.policy:
        raise MoeModelError("--knob and --cpu-share set the knobs of --policy's policies: name one (or 'all')")
    if args.policy:
        results, policies = _simulate_with_policies(args, model, work, budgets, main)
    else:
        kernel = (main.band_kernel or main.kernel)()  # a modelled policy's open readings as a band
        results, policies = simulate_budgets(model, work, budgets, placement_without_machine(args), kernel), None
    fields = {"policy": main.name, "policy_exact": main.label == EXACT, "build": args.build}
    if args.json:
        rows = [r.as_dict() | {"policy": main.name} for r in results]
        out = {"model": model.name, "workload": work.label, "budgets": rows} | fields
        print(to_json(out | ({"policies": policies} if policies else {})))
    else:
        head = f"{hit_rate_wording(main.name, args.build).sentence}; policy source: {main.source}\n"
        print(head + format_sim(results, work) + (format_policies(policies) if policies else ""))
    return 0


def add_parser(sub) -> None:
    sim = sub.add_parser("simulate", help="replay routing through llama.cpp's slot pools at one or many budgets")
    sim.add_argument("--model", required=True, help="GGUF path, header prefix, URL or first shard")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="routing trace: .npz (token trace or recorded llama.cpp trace) or .csv")
    source.add_argument("--synthetic", action="store_true", help="synthetic routing (a model; knobs below)")
    add_max_lookups(sim)
    budgets = sim.add_mutually_exclusive_group(required=True)
    add_setting(budgets, SCENARIO["budget_mib"], default=None)
    budgets.add_argument("--budgets-mib", type=wholes, metavar="A,B,...", help="budgets (whole MiB)")
    budgets.add_argument("--budget-range", type=budget_range, metavar="LO:HI:COUNT", help="COUNT budgets, LO to HI MiB")
    add_placement(sim)
    add_settings(sim, SCENARIO, ("concurrency", "draft_tokens", "accept_rate"))
    add_settings(sim, BATCHING, ("prompt_tokens",))
    add_settings(sim, SCENARIO, ("n_ubatch",))
    sim.add_argument(
        "--no-warmup", action="store_true", help=f"skip llama-server's {WARM_UP_TOKENS}-token warm-up (BOS, EOS)"
    )
    sim.add_argument(
        "--tokens",
        type=ranged(whole, 1, MAX_SYNTHETIC_TOKENS),
        default=20_000,
        help="synthetic decode tokens (fewer than the most for a model of more than 48 layers x 128 experts: "
        "limits.MAX_SYNTHETIC_DRAWS)",
    )
    sim.add_argument("--skew", type=float, help="synthetic: spread of expert popularity")
    sim.add_argument("--working-set", type=float, help="synthetic: share of a layer's experts one sequence uses")
    sim.add_argument("--drift", type=float, help="synthetic: per-token chance the working set swaps an expert")
    sim.add_argument("--reuse", type=float, help="synthetic: chance a previous-token expert is picked again")
    add_settings(sim, BATCHING, ("seed",))
    sim.add_argument(
        "--export-workload", metavar="FILE", help="also write the batched workload as NPZ (replayable; held in memory)"
    )
    also = "also replay with a replacement policy (or 'all'; held in memory): see docs/cli.md"
    add_setting(sim, SCENARIO["policy"], help=also)
    add_knobs(sim)
    add_setting(sim, SCENARIO["build"])
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(func=cmd_simulate)
