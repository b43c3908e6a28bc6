"""The command line's flags, generated from the settings declared on the dataclasses (moe_model.settings).

Each flag's spellings, type, range, choices, default and help come from its field; an alias sets the same
destination (mutually exclusive with the flag). `scenario_from_args` reads the flags back into a Scenario.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from moe_model.errors import MoeModelError
from moe_model.limits import CLI_MAX_LOOKUPS, MAX_BUDGET_MIB, MAX_BUDGETS, MAX_GPUS, MAX_LOOKUPS_FLAG
from moe_model.llama.slot_plan import Placement
from moe_model.policies.knobs import FLAG_KNOBS, parse_knobs
from moe_model.readers.traces import CLI_REPLAY, ReplayCap, declared_lookups
from moe_model.settings import Alias, Setting, settings_of
from moe_model.speed.hardware import MACHINE_SETTINGS
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching

HARDWARE = MACHINE_SETTINGS  # the GPU's figures and its host's
SCENARIO = settings_of(Scenario)
PLACEMENT = settings_of(Placement)
BATCHING = settings_of(Batching)
BUILD_FOR_UNLOGGED = (
    "llama.cpp build of runs whose log names none (a log's own `build:` line wins, then a cache size line in MiB "
    "only, b11480-b12169's: plain LRU; default: mainline)"
)


def ranged(cast: Callable, lo=None, hi=None) -> Callable[[str], object]:
    """An argparse type: `cast`, then in [lo, hi] (and finite), else a one-line usage error naming the range."""

    def parse(text: str):
        value = cast(text)
        if not (math.isfinite(value) and (lo is None or lo <= value) and (hi is None or value <= hi)):
            raise argparse.ArgumentTypeError(f"must be in {_bound(lo)}..{_bound(hi)}, got {text}")
        return value

    return parse


def _bound(value) -> str:
    return "" if value is None else f"{value:,}"


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def whole(text: str) -> int:
    """A whole number; '403.7' is refused, not cut to 403."""
    value = number(text)
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def numbers(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def per_gpu(value: Callable[[str], float]) -> Callable[[str], tuple[float, ...]]:
    """An argparse type: comma-separated values, one per GPU (at most MAX_GPUS), each read by `value`."""

    def parse(text: str) -> tuple[float, ...]:
        values = tuple(value(x) for x in text.split(","))
        if len(values) > MAX_GPUS:
            raise argparse.ArgumentTypeError(f"at most {MAX_GPUS} values (one per GPU), got {len(values)}")
        return values

    return parse


def wholes(text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers; any fraction is refused."""
    values = numbers(text)
    fractions = [x for x in values if not float(x).is_integer()]
    if fractions:
        raise argparse.ArgumentTypeError(f"expected whole numbers, got {fractions[0]:g} in {text!r}")
    return tuple(int(x) for x in values)


def _checked(parse: Callable[[str], object]) -> Callable[[str], object]:
    """A setting's own parser, its one-line refusal turned into a usage error."""

    def checked(text: str):
        try:
            return parse(text)
        except MoeModelError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return checked


def flag_type(s: Setting) -> Callable[[str], object] | None:
    """The argparse type of a setting: its own parser, else by its default's type within its range."""
    kind = s.parse or type(s.default)
    if kind is int:
        return ranged(whole, s.lo, s.hi)
    if kind is float:
        return ranged(number, s.lo, s.hi)
    if kind is tuple:
        return per_gpu(ranged(number, s.lo, s.hi))
    return _checked(s.parse) if s.parse else None  # text: checked by the setting's parser or its choices


def add_setting(parser, s: Setting, **override) -> argparse.Action:
    """One flag from its setting (and its aliases, exclusive with it); `override` changes what a command needs
    changed (required, a help that says what the flag means there). The action records its setting."""
    target = parser.add_mutually_exclusive_group() if s.aliases else parser
    metavar = s.metavar or (None if s.choices else s.flag.lstrip("-").upper().replace("-", "_"))
    kwargs = {"dest": s.name, "default": s.default, "help": s.help, "metavar": metavar}
    if isinstance(s.default, bool):
        kwargs |= {"action": "store_true"}
        kwargs.pop("metavar")
    else:
        kwargs |= {"type": flag_type(s)} | ({"choices": s.choices} if s.choices else {})
    action = target.add_argument(*s.flags, **(kwargs | override))
    action.setting = s
    for alias in s.aliases:
        _add_alias(target, s, alias).setting = s
    return action


def _add_alias(group, s: Setting, alias: Alias) -> argparse.Action:
    kwargs = {"dest": s.name, "default": argparse.SUPPRESS, "help": alias.help}
    if alias.metavar is None:
        return group.add_argument(alias.flag, action="store_const", const=alias.value, **kwargs)
    count = ranged(whole, alias.lo, alias.hi)

    def value(text: str) -> str:
        return alias.value.format(count(text))

    return group.add_argument(alias.flag, type=value, metavar=alias.metavar, **kwargs)


def add_settings(parser, settings: dict[str, Setting], names: Sequence[str]) -> None:
    for name in names:
        add_setting(parser, settings[name])


def add_knobs(parser) -> None:
    """--knob NAME=VALUE (repeatable), and each llama.cpp flag knob's own spelling, its alias: `--cpu-share F` is
    `--knob share=F` (both append to one list; the last spelling of a knob wins)."""
    parser.add_argument(
        "--knob", action="append", default=[], metavar="NAME=VALUE", help="a policy knob, e.g. share=0.8 (repeatable)"
    )
    for knob in FLAG_KNOBS:
        s, value = knob.setting, ranged(number, knob.setting.lo, knob.setting.hi)

        def spelled(text: str, name: str = knob.name, value=value) -> str:
            return f"{name}={value(text)}"

        action = parser.add_argument(*s.flags, dest="knob", action="append", type=spelled, metavar="F", help=s.help)
        action.setting = s


def add_placement(parser) -> None:
    """The one placement vocabulary every command that takes a placement accepts: --placement cpu-moe | fit |
    n-cpu-moe:K | gpu, llama.cpp's --cpu-moe / --n-cpu-moe K, and -ngl / -ts."""
    add_setting(parser, SCENARIO["placement"], default=SCENARIO["placement"].default.text)
    add_settings(parser, PLACEMENT, ("n_gpu_layers", "tensor_split"))


def placement_from_args(args: argparse.Namespace) -> Placement:
    """The --placement string (or its alias) with -ngl and -ts."""
    multi_gpu = {"n_gpu_layers": args.n_gpu_layers, "tensor_split": args.tensor_split}
    text = getattr(args, "placement", SCENARIO["placement"].default.text)
    return Placement.parse(text, n_gpus=max(1, len(args.tensor_split)), **multi_gpu)


def scenario_from_args(args: argparse.Namespace, **fixed) -> Scenario:
    """The Scenario of the flags a command has; the settings it has no flag for keep their defaults."""
    values = {name: getattr(args, name) for name in SCENARIO if name != "placement" and hasattr(args, name)}
    values |= {"policy_reading": args.policy_reading} if getattr(args, "policy_reading", ()) else {}  # --machine's
    values |= {"knobs": tuple(parse_knobs(args.knob).items())} if hasattr(args, "knob") else {}
    return Scenario(**(values | {"placement": placement_from_args(args)} | fixed))


def placement_without_machine(args: argparse.Namespace) -> Placement:
    """The placement of plan and simulate, which have no machine to resolve --fit's layer count on."""
    placement = placement_from_args(args)
    if placement.fit:
        raise MoeModelError(
            "--placement fit needs a machine: use predict or recommend with --hardware "
            "(plan and simulate take cpu-moe, gpu or n-cpu-moe:K)"
        )
    return placement


def budget_range(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected LO:HI:COUNT, got {text!r}")
    lo, hi, count = wholes(",".join(parts))
    if not (0 <= lo <= hi <= MAX_BUDGET_MIB and 1 <= count <= MAX_BUDGETS):
        raise argparse.ArgumentTypeError(f"expected 0 <= LO <= HI and 1 <= COUNT <= {MAX_BUDGETS}, got {text!r}")
    return lo, hi, count


def add_max_lookups(parser) -> None:
    """--max-lookups: the most expert ids a command replays from a trace (work bounded, not only memory)."""
    parser.add_argument(
        "--max-lookups",
        type=ranged(whole, 1, MAX_LOOKUPS_FLAG),
        default=CLI_MAX_LOOKUPS,
        metavar="N",
        help=f"replay at most N expert ids of a trace (default {CLI_MAX_LOOKUPS:,}: an answer in seconds)",
    )


def trace_cap(args: argparse.Namespace) -> ReplayCap:
    return replace(CLI_REPLAY, max_lookups=getattr(args, "max_lookups", CLI_MAX_LOOKUPS))


def check_trace_first(args: argparse.Namespace) -> None:
    """A command's --trace checked for what it declares (its cheap checks, its expert ids against the cap) before
    the kernels compile or the model is read: a hostile file is refused in about a second."""
    if getattr(args, "trace", None):
        trace_cap(args).check(declared_lookups(args.trace))
