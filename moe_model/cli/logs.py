"""`parse-log`: what the cache did in a llama-server / llama-cli -lv 4 log, cross-checked against a header."""

from __future__ import annotations

import argparse
from pathlib import Path

from moe_model.cli.args import BUILD_FOR_UNLOGGED, SCENARIO, add_setting
from moe_model.cli.output import format_run, to_json
from moe_model.readers.model_spec import load_model


def cmd_parse_log(args: argparse.Namespace) -> int:
    from moe_model.fits.log_timings import crosscheck, derive, point_from_run
    from moe_model.readers.logs import parse_log

    runs = parse_log(args.log)
    model = load_model(args.model) if args.model else None
    out = []
    for run in runs:
        item = run.as_dict()
        item["derived"] = vars(derive(run))
        item["measured_point"] = point_from_run(run, Path(args.log).name)
        if model is not None:
            budget, lines = crosscheck(run, model, build=args.build)
            item["crosscheck"] = {"budget_mib": budget, "lines": [vars(c) | {"ok": c.ok} for c in lines]}
        out.append(item)
    if args.json:
        print(to_json({"runs": out}))
    else:
        print("\n\n".join(format_run(r, r.get("crosscheck", {}).get("lines")) for r in out))
    return 0


def add_parser(sub) -> None:
    logs = sub.add_parser("parse-log", help="what the cache did, from a llama-server / llama-cli -lv 4 log")
    logs.add_argument("log")
    logs.add_argument("--model", help="GGUF header to cross-check the logged slots against")
    add_setting(logs, SCENARIO["build"], default=None, help=BUILD_FOR_UNLOGGED)
    logs.add_argument("--json", action="store_true")
    logs.set_defaults(func=cmd_parse_log)
