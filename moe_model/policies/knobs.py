"""What a policy declares it can be tuned by (Knob), and the knobs a Scenario carries.

A scenario's knobs are (name, value) pairs, sorted by name: hashable, as the app's caches need. A knob that is a
llama.cpp flag (the CPU share: `--moe-cache-cpu-share F`, `--knob share=F`, `--cpu-share F`) carries that flag's
Setting: its CLI alias, the app's URL key and widget. This module imports no kernel, so that the Scenario and the
CLI read the flag knobs without loading the policies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from moe_model.errors import MoeModelError
from moe_model.llama.builds import CPU_SHARE_BUILD
from moe_model.settings import DEFAULT_CPU_SHARE, Setting, Widget

KnobValue = float | str | None
KnobPairs = tuple[tuple[str, KnobValue], ...]

CPU_SHARE_STOPS = (0.0, 0.5, 0.8, 0.9, 0.95)  # the app's CPU-share choices: none, then b12191's useful range


@dataclass(frozen=True)
class Knob:
    """One tunable parameter of a policy: its default, help and accepted range or choices; `setting` where it is a
    llama.cpp flag (its value > 0 selects the policy, and the server's command line carries it)."""

    name: str
    default: KnobValue
    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    llama_flag: str = ""
    setting: Setting | None = None
    since_build: int = 0  # a llama.cpp flag's first build: the policy is not run on older ones

    def check(self, value: KnobValue) -> KnobValue:
        """The value, checked against the declaration: one of its choices, else a number within its range."""
        if self.choices:
            if value not in self.choices:
                raise MoeModelError(f"knob {self.name} must be one of {self.choices}, got {value!r}")
            return value
        if not isinstance(self.default, (int, float)):
            if isinstance(value, (str, int, float)):  # the static set's profile: a workload the library passes
                raise MoeModelError(f"knob {self.name} is {self.help}: not a value to type")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise MoeModelError(f"{self.spelling} takes a number, got {value!r}")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise MoeModelError(f"{self.spelling} must be {self.bounds}, got {value:g}")
        return float(value)

    @property
    def bounds(self) -> str:
        """Its range in words: "in [lo, hi]", ">= lo" or "<= hi"."""
        if self.lo is not None and self.hi is not None:
            return f"in [{self.lo:g}, {self.hi:g}]"
        return f">= {self.lo:g}" if self.lo is not None else f"<= {self.hi:g}"

    @property
    def spelling(self) -> str:
        """How messages name it: its llama.cpp flag where it has one."""
        return f"{self.llama_flag} (--knob {self.name})" if self.llama_flag else f"knob {self.name}"


SHARE_SETTING = Setting(
    help=f"--moe-cache-cpu-share F (b12191, a modelled policy; same as --knob share=F; {DEFAULT_CPU_SHARE:g} where "
    "--policy names it without a share)",
    flags=("--cpu-share",),
    lo=0.0,
    hi=1.0,
    url_key="share",
    widget=Widget("--moe-cache-cpu-share (b12191, a modelled policy)", "select_slider", options=CPU_SHARE_STOPS),
    name="cpu_share",
    default=0.0,  # off: no --moe-cache-cpu-share on the server's command line
    llama_flags=("--moe-cache-cpu-share",),
    llama_default=0.0,  # tag b12191 (#30966): 0, no CPU share
)
# the CPU-share policy's knob (policies.cpu_share), declared here so that the Scenario reads it without the kernels
SHARE = Knob(
    "share",
    DEFAULT_CPU_SHARE,
    "the share of missed selections computed on the CPU once the pool is full",
    0.0,
    1.0,
    llama_flag=SHARE_SETTING.llama_flags[0],
    setting=SHARE_SETTING,
    since_build=CPU_SHARE_BUILD,
)
FLAG_KNOBS = (SHARE,)  # the knobs that are llama.cpp flags (a test checks the registry declares no other)


def knob_pairs(given: Iterable[tuple[str, KnobValue]], keep_off: bool = False) -> KnobPairs:
    """Knobs as a Scenario keeps them: sorted by name, each named once; a flag knob at its off value left out
    (`--cpu-share 0` is no share) unless `keep_off` (the policy is named: its share 0 is a setting of it)."""
    pairs = tuple(given)
    if any(not isinstance(p, tuple) or len(p) != 2 or not isinstance(p[0], str) for p in pairs):
        raise MoeModelError(f"knobs are (name, value) pairs, got {pairs!r}")
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise MoeModelError(f"a knob is given twice: {sorted(names)}")
    off = {k.name: k.setting.default for k in FLAG_KNOBS if k.setting and not keep_off}
    return tuple(sorted((n, v) for n, v in pairs if n not in off or v != off[n]))


def parse_knobs(texts: Sequence[str]) -> dict[str, KnobValue]:
    """--knob NAME=VALUE texts: numbers as numbers, anything else (ClassLRU's clock=group) as text; the last
    spelling of a name wins (`--cpu-share 0.8` is `--knob share=0.8`)."""
    knobs: dict[str, KnobValue] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise MoeModelError(f"--knob expects NAME=VALUE, got {text!r}")
        try:
            knobs[name.strip()] = float(value)
        except ValueError:
            knobs[name.strip()] = value.strip()
    return knobs


def flag_value(knobs: KnobPairs, knob: Knob) -> float:
    """A flag knob's value in a scenario's knobs (checked: its declared range): its setting's off value where not
    given."""
    given = dict(knobs)
    off = knob.setting.default if knob.setting else 0.0
    return float(knob.check(given[knob.name])) if knob.name in given else float(off)
