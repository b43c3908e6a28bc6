"""In-page widgets and messages: each declared setting's widget (control), the budget's slider and number box,
the fit verdicts, the decode range (as words or drawn), library errors as messages (never a traceback), and how a
printed command names the model."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from contextlib import contextmanager

import streamlit as st

from moe_model.answers.basis import MODELLED
from moe_model.answers.fit_advice import FitChange
from moe_model.charts_range import range_bar
from moe_model.errors import MoeModelError, app_words
from moe_model.settings import Setting
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.ranges import largest_step
from moe_model.speed.time_model import Prediction
from moe_model.speed.vram import VramBreakdown
from ui.badges import badge
from ui.reused import reused
from ui.state import SCENARIO, keep, kept_setting
from ui.text import literal


@contextmanager
def friendly_errors():
    """Show library errors as messages and anything else without a traceback."""
    try:
        yield
    except MoeModelError as err:
        st.error(literal(app_words(err), None))  # the app's controls named, not the CLI's flags
    except Exception as err:  # noqa: BLE001 - the page must never show a traceback
        st.error(f"Something went wrong: {type(err).__name__}: {literal(err)}")
        print(traceback.format_exc())


def _follow(moved: str, other: str) -> None:
    """The budget's slider and number box show one value: the one the user just changed sets the other (a typed
    budget off the slider's stops is shown on the slider as typed; a drag moves to the next stop)."""
    st.session_state[other] = st.session_state[moved]


def budget_slider(box, top: int, step: int = 1) -> int:
    """--moe-cache-mib as a slider moving in `step` MiB and a number box for any exact value, both ending at
    `top` (speed.curve.slider_top) and showing the same value; the box's value is the budget, kept across pages and
    in the URL."""
    s = SCENARIO["budget_mib"]
    key, label, lo = s.url_key, s.widget.label, s.widget.lo
    value = kept_setting(s, top)
    chosen = st.session_state.setdefault("kept", {}).get(key)
    if chosen is not None and chosen > top:  # the context, placement or machine changed what fits: say so
        box.info(f"The budget {chosen:,} MiB no longer fits this setting: now {top:,} MiB, the largest that does.")
    box.slider(label, lo, top, value, step, key=key, on_change=_follow, args=(key, f"{key}_box"))
    budget = int(
        box.number_input(
            f"exact {label} (MiB)", lo, top, value, key=f"{key}_box", on_change=_follow, args=(f"{key}_box", key)
        )
    )
    keep(**{key: budget})
    return budget


def setting_input(box, s: Setting, value, key: str, hi=None):
    """A declared setting's widget showing `value`: its label, kind, range and step, or its options."""
    w, cast = s.widget, type(value)
    top = w.hi if hi is None else hi
    if w.kind == "selectbox":
        return box.selectbox(w.label, w.options, list(w.options).index(value), key=key)
    if w.kind == "select_slider":
        return box.select_slider(w.label, list(w.options), value, key=key)
    step = None if w.step is None else cast(w.step)
    if w.kind == "number":
        return cast(box.number_input(w.label, cast(w.lo), cast(top), value, step, key=key))
    return cast(box.slider(w.label, cast(w.lo), cast(top), value, step, key=key))


def control(box, s: Setting, hi=None):
    """A declared setting's widget, its value kept across pages and in the URL under the setting's key."""
    value = setting_input(box, s, kept_setting(s, hi), s.url_key, hi)
    keep(**{s.url_key: value})
    return value


def fit_verdicts(vram: VramBreakdown, host: HostMemory, advice: Sequence[FitChange] = ()) -> bool:
    """Lead with whether the setting fits VRAM and RAM; True when it runs (VRAM too close to call, or mmap'd experts
    streaming from disk: a warning). When not, what would (`advice`: fit_advice.would_fit for this setting)."""
    tag = badge(MODELLED)  # the memory accounts are the model's (the cache's slots replayed exactly within them)
    (st.success if vram.fits else st.warning if vram.tight else st.error)(f"{tag} {vram.verdict}")
    (st.success if host.fits else st.warning if host.runs else st.error)(f"{tag} {host.verdict}")
    if advice:
        lines = "\n".join(f"- {c.text} {tag}" for c in advice)
        st.info(f"**What would fit** (each alone, checked as above):\n{lines}")
    return (vram.fits or vram.tight) and host.runs


def range_caption(pred: Prediction, basis: str) -> None:
    """What the decode range is made of, largest first, and the one step that would narrow it most (in the app's
    words), with the badge of `basis`, the decode's."""
    if not pred.range_sources:
        return
    parts = " · ".join(f"{s.source} {s.low_tps:.1f}–{s.high_tps:.1f}" for s in pred.range_sources)
    step = largest_step(pred.decode_tps, pred.range_sources, app=True)
    st.caption(f"{badge(basis)} Range from: {parts} t/s. {step[:1].upper()}{step[1:]}.")


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


def range_chart(pred: Prediction, key: str, basis: str) -> None:
    """The decode range drawn with its sources (charts_range.range_bar), and under it the one step that would narrow
    it most (what narrows each source is in its bar's hover), in the app's words; `basis`: the decode's word."""
    if not pred.range_sources:
        return
    st.plotly_chart(reused(f"range:{key}", (pred, basis), lambda: range_bar(pred, basis)), width="stretch", key=key)
    step = largest_step(pred.decode_tps, pred.range_sources, app=True)
    st.caption(f"{badge(basis)} {step[:1].upper()}{step[1:]}.")
