"""Each setting declared once, on its dataclass field (as vidur's config dataclasses do).

A field made with `setting(...)` carries its default, help, command-line flags (the first is the flag, the
others old or llama.cpp spellings kept as aliases), accepted range or choices, the app's URL key and widget, and
where it is a llama-server setting, that server's flag (or environment variable) and llama.cpp's own default: the
server command this tool prints carries the settings that differ from it (speed/server_command.py).
A field made with `prior(...)` is a fitted parameter: its default is the prior the fit is pulled towards,
with the pull's log-space width, the fit's bounds and the fit that sets it. The CLI's flags (cli/args.py),
the app's URL state and widgets (ui/state.py, ui/widgets.py) and the calibration's tables (speed/time_model.py) are
generated from these declarations: `settings_of(cls)` lists them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache
from numbers import Real
from typing import Any

from moe_model.errors import MoeModelError

_KEY = "moe_model.setting"
DEFAULT_CPU_SHARE = 0.5  # --moe-cache-cpu-share where the CPU-share policy is named without one (run and priced)


@dataclass(frozen=True)
class Widget:
    """The app's control of a setting: `kind` (slider, number, text, select_slider, selectbox), its range and step or
    its options; `start` where the app opens elsewhere than at the library's default; `hi` None: the page's."""

    label: str
    kind: str = "slider"
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    options: tuple = ()
    start: Any = None


@dataclass(frozen=True)
class Alias:
    """Another spelling of a setting: `flag` stores `value`, or with a metavar `flag N` stores value.format(N)
    (N a whole number in lo..hi)."""

    flag: str
    value: str
    help: str
    metavar: str | None = None
    lo: int = 0
    hi: int | None = None


@dataclass(frozen=True)
class Setting:
    """How one field is set from outside: on the command line, in the app's URL, by the app's widget."""

    help: str
    flags: tuple[str, ...] = ()
    lo: float | None = None  # accepted range (the CLI refuses outside it, the dataclass too)
    hi: float | None = None
    choices: tuple = ()
    url_key: str = ""
    widget: Widget | None = None
    metavar: str | None = None
    aliases: tuple[Alias, ...] = ()
    parse: Callable[[str], Any] | None = None  # the command line's text to the value (default: by the default's type)
    llama_flags: tuple[str, ...] = ()  # llama-server's spellings (the first is printed); none: not a server flag
    llama_env: str = ""  # or the environment variable llama.cpp reads it from
    llama_default: Any = None  # llama.cpp's own default, as this field's value (b11549 common/arg.cpp, common.h)
    name: str = ""  # the field's name and default, filled in by settings_of
    default: Any = None

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def on_server(self) -> bool:
        """Whether llama-server is started with it (a flag or an environment variable), not a request's."""
        return bool(self.llama_flags or self.llama_env)

    @property
    def label(self) -> str:
        """How a refusal names it: its flags, and llama-server's spelling where that is another."""
        own = "/".join(self.flags) or self.name
        if self.llama_env or (self.llama_flags and self.llama_flags[0] not in self.flags):
            return f"{own} ({f'llama-server {self.llama_flags[0]}' if self.llama_flags else self.llama_env})"
        return own

    def refusal(self, value: Any) -> str:
        """Why `value` is outside the declared choices or range (the CLI's wording), or "" where it is inside."""
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}, got {value!r:.40}"
        if self.lo is None and self.hi is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, Real):
            return f"takes a number, got {value!r:.40}"
        lo, hi = self.lo if self.lo is not None else -math.inf, self.hi if self.hi is not None else math.inf
        return "" if lo <= value <= hi else f"must be in {_bound(self.lo)}..{_bound(self.hi)}, got {value:,}"


@dataclass(frozen=True)
class Prior:
    """A fitted parameter: the prior is the field's default (a physically expected value); `width` the log-space
    width of the fit's pull towards it, (lo, hi) the fit's bounds, `fit` the fit that sets it."""

    help: str
    width: float
    lo: float
    hi: float
    fit: str = "decode"  # or "prefill"
    name: str = ""
    default: Any = None


def setting(default: Any = MISSING, *, factory: Any = MISSING, **spec) -> Any:
    """A dataclass field with its Setting (keyword arguments of Setting)."""
    return field(default=default, default_factory=factory, metadata={_KEY: Setting(**spec)})


def prior(default: float, help: str, width: float, lo: float, hi: float, fit: str = "decode") -> Any:
    """A fitted parameter's dataclass field: its prior (the default), the prior's log-space width and the bounds."""
    return field(default=default, metadata={_KEY: Prior(help, width, lo, hi, fit)})


@cache
def settings_of(cls: type) -> dict[str, Any]:
    """The declared settings (Setting or Prior) of a dataclass's fields, in field order, named and with defaults."""
    out = {}
    for f in fields(cls):
        spec = f.metadata.get(_KEY)
        if spec is not None:
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            default = None if default is MISSING else default  # a required field: no default
            out[f.name] = replace(spec, name=f.name, default=default)
    return out


def _bound(value: float | None) -> str:
    return "" if value is None else f"{value:,}"


def check_declared(obj: Any, error: type[MoeModelError] = MoeModelError) -> None:
    """Refuse a dataclass whose declared field (each value of a tuple field) is outside its setting's range or
    choices, in one line naming the flag; None is a setting not given. Cross-field rules stay with the class."""
    for name, s in settings_of(type(obj)).items():
        value = getattr(obj, name) if isinstance(s, Setting) else None  # a Prior's bounds are the fit's
        for one in value if isinstance(value, tuple) else () if value is None else (value,):
            if problem := s.refusal(one):
                raise error(f"{s.label} {problem}")
