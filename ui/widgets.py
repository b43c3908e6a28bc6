"""In-page widgets and messages: the budget's slider and number box, the fit verdicts, library errors as
messages (never a traceback), and how a printed command names the model."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from contextlib import contextmanager

import streamlit as st

from moe_model.errors import MoeModelError
from moe_model.speed.fit_advice import FitChange
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.vram import VramBreakdown
from ui.state import keep, kept


@contextmanager
def friendly_errors():
    """Show library errors as messages and anything else without a traceback."""
    try:
        yield
    except MoeModelError as err:
        st.error(str(err))
    except Exception as err:  # noqa: BLE001 - the page must never show a traceback
        st.error(f"Something went wrong: {type(err).__name__}: {err}")
        print(traceback.format_exc())


def _follow(moved: str, other: str) -> None:
    """The budget's slider and number box show one value: the one the user just changed sets the other."""
    st.session_state[other] = st.session_state[moved]


def _snap_to_stop(step: int, top: int) -> None:
    """A typed budget moves the slider to its nearest stop; the number box keeps the exact value."""
    st.session_state["budget"] = min(top, round(st.session_state["budget_box"] / step) * step)


def budget_slider(box, top: int, default: int = 10000, step: int = 1) -> int:
    """--moe-cache-mib as a slider moving in `step` MiB and a number box for any exact value, both ending at
    `top` (the largest that fits); the box's value is the budget, kept across pages and in the URL."""
    value = kept("budget", min(default, top), int, 0, top)
    chosen = st.session_state.setdefault("kept", {}).get("budget")
    if chosen is not None and chosen > top:  # the context, placement or machine changed what fits: say so
        box.info(f"The budget {chosen:,} MiB no longer fits this setting: now {top:,} MiB, the largest that does.")
    box.slider(
        "--moe-cache-mib",
        0,
        top,
        min(top, round(value / step) * step),
        step,
        key="budget",
        on_change=_follow,
        args=("budget", "budget_box"),
    )
    budget = int(
        box.number_input(
            "exact --moe-cache-mib (MiB)", 0, top, value, key="budget_box", on_change=_snap_to_stop, args=(step, top)
        )
    )
    keep(budget=budget)
    return budget


def fit_verdicts(vram: VramBreakdown, host: HostMemory, advice: Sequence[FitChange] = ()) -> bool:
    """Lead with whether the setting fits VRAM and RAM; True when both do. When not, what would (`advice`:
    fit_advice.would_fit for this setting)."""
    for fits, line in ((vram.fits, vram.verdict), (host.fits, host.verdict)):
        (st.success if fits else st.error)(line)
    if advice:
        st.info("**What would fit** (each alone, checked as above):\n" + "\n".join(f"- {c.text}" for c in advice))
    return vram.fits and host.fits


MODEL_VAR = '"$MODEL"'  # commands name the model through a variable set once, on the block's first line


def model_flag_path(source: str, model_key: str) -> str:
    """What a printed command names the model by: a URL or path as given; $MODEL for an upload or a bundled
    header (the app holds only the header, the full file is on the user's machine)."""
    if model_key.startswith("upload:") or "/" not in source:
        return MODEL_VAR
    return source


def runnable(commands: str, source: str) -> str:
    """Commands that run as pasted: where they name $MODEL, a first line sets it, explained once."""
    if MODEL_VAR not in commands:
        return commands
    name = source.rsplit("/", 1)[-1]
    return f"MODEL=/path/to/{name}  # your full model file: this app read only its header\n{commands}"
