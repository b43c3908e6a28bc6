"""`plan`: the slot plan llama.cpp computes for a budget (exact, from the GGUF header)."""

from __future__ import annotations

import argparse

from moe_model.cli.args import (
    SCENARIO,
    add_placement,
    add_setting,
    placement_without_machine,
)
from moe_model.cli.output import format_plan, to_json
from moe_model.llama.slot_plan import plan_report
from moe_model.readers.model_spec import load_model


def cmd_plan(args: argparse.Namespace) -> int:
    report = plan_report(load_model(args.source), args.budget_mib, placement_without_machine(args))
    print(to_json(report) if args.json else format_plan(report))
    return 0


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="what --moe-cache-mib N buys for a GGUF model, as llama.cpp computes it")
    plan.add_argument("source", help="GGUF path, header prefix file, http(s) URL, or first shard")
    add_setting(plan, SCENARIO["budget_mib"], required=True)
    add_placement(plan)
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)
