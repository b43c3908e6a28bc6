"""Command line: `python -m moe_model {plan,simulate,...} ...`.

Flags and JSON fields are a contract other tools script against: keep their names.
Exit 0 when the input was read (also when the server would not start), 1 with a one-line
message on stderr when it could not be.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from moe_model.errors import MoeModelError
from moe_model.model_spec import load_model
from moe_model.slot_plan import Placement, plan_report


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _add_placement_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n-cpu-moe",
        type=int,
        metavar="K",
        help="experts of the first K layers in host memory (default: --cpu-moe, all layers)",
    )
    parser.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=int,
        default=-1,
        metavar="N",
        help="layers offloaded to the GPU(s) (default: all)",
    )
    parser.add_argument(
        "--tensor-split",
        "-ts",
        type=_floats,
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
    print(json.dumps(report, indent=1) if args.json else _format_plan(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m moe_model", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="what --moe-cache-mib N buys for a GGUF model, as llama.cpp computes it")
    plan.add_argument("source", help="GGUF path, header prefix file, http(s) URL, or first shard")
    plan.add_argument("--budget-mib", type=int, required=True, help="--moe-cache-mib value")
    _add_placement_args(plan)
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except MoeModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {err.strerror or err}: {getattr(err, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 1
