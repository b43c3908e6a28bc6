"""In-page widgets and messages: the budget's slider and number box, the fit verdicts, library errors as
messages (never a traceback), and how a printed command names the model."""

from __future__ import annotations

import traceback
from contextlib import contextmanager

import streamlit as st

from moe_model.errors import MoeModelError
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


def fit_verdicts(vram: VramBreakdown, host: HostMemory) -> bool:
    """Lead with whether the setting fits VRAM and RAM; True when both do (VRAM too close to call: a warning)."""
    (st.success if vram.fits else st.warning if vram.tight else st.error)(vram.verdict)
    (st.success if host.fits else st.error)(host.verdict)
    return (vram.fits or vram.tight) and host.fits


def model_flag_path(source: str, model_key: str) -> str:
    """What a printed command names the model by: a placeholder when it came from an upload."""
    return "/path/to/model.gguf" if model_key.startswith("upload:") else source
