"""The settings every page shares, in the session and in the URL (shareable links): read with a fallback and a
warning for a bad link value, written back on every change."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from moe_model.policies.knobs import FLAG_KNOBS
from moe_model.settings import Setting, settings_of
from moe_model.speed.hardware import MACHINE_SETTINGS
from moe_model.speed.scenario import Scenario
from ui.text import literal


def url_value(key: str, default, cast: Callable = str, lo=None, hi=None, choices=None):
    """A setting from the URL's query parameters (shareable links): cast, clamped into [lo, hi] or checked
    against choices; an absurd, unknown or unreadable value gets a warning and falls back."""
    raw = st.query_params.get(key)
    if raw is None:
        return default
    try:
        value = cast(raw)
    except (TypeError, ValueError, OverflowError):
        return _stale(key, raw, default)
    if choices is not None:
        return value if value in choices else _stale(key, raw, default)
    if lo is not None and value < lo:
        return _stale(key, raw, lo)
    if hi is not None and value > hi:
        return _stale(key, raw, hi)
    return value


def _stale(key: str, raw: str, used):
    st.warning(f"The link's {literal(key)}={literal(raw)} is unknown or out of range here: using {literal(used)}.")
    return used


def remember(**values) -> None:
    """Write settings into the URL so the view can be shared: only those it does not hold yet (each write sends the
    browser the whole URL; a run kept ~40 settings, 38 messages, where one changed)."""
    for key, value in values.items():
        if st.query_params.get(key) != str(value):
            st.query_params[key] = str(value)


def kept(key: str, default, cast: Callable = str, lo=None, hi=None, choices=None):
    """A setting shared by every page: the value last chosen on any page this session, else the URL's, else
    the default (widget state is dropped when a page that lacks the widget runs, this store is not)."""
    store = st.session_state.setdefault("kept", {})
    if key not in store:
        return url_value(key, default, cast, lo, hi, choices)
    value = store[key]
    if choices is not None:
        return value if value in choices else default
    return min(max(value, lo if lo is not None else value), hi if hi is not None else value)


def keep(**values) -> None:
    """Store settings for every page and write them into the URL."""
    st.session_state.setdefault("kept", {}).update(values)
    remember(**values)


def forget(*keys: str) -> None:
    """Drop kept settings (a new GPU resets the machine's edits to its preset)."""
    store = st.session_state.setdefault("kept", {})
    for key in keys:
        store.pop(key, None)
        st.query_params.pop(key, None)


# each setting's URL key, widget and range; a knob that is a llama.cpp flag (the CPU share) with its own setting
SCENARIO = settings_of(Scenario) | {k.setting.name: k.setting for k in FLAG_KNOBS}
HARDWARE = MACHINE_SETTINGS
URL_SETTINGS = {s.url_key: s for s in (*SCENARIO.values(), *HARDWARE.values()) if s.url_key}


def kept_setting(s: Setting, hi=None, start=None):
    """A declared setting's kept value (another page's, else the URL's, else where its widget starts), within its
    widget's range (`hi`: the page's end where the declaration leaves it open) or options."""
    w = s.widget
    first = next(v for v in (start, w.start, s.default) if v is not None)
    if w.options:
        return kept(s.url_key, first, type(first), choices=list(w.options))
    top = w.hi if hi is None else hi
    return kept(s.url_key, first if top is None else min(first, top), type(first), w.lo, top)


def as_bool(raw) -> bool:
    """A toggle's value from a link ("True"/"False", "1"/"0")."""
    if str(raw) in ("True", "true", "1"):
        return True
    if str(raw) in ("False", "false", "0"):
        return False
    raise ValueError(raw)


def kept_toggle(box, label: str, key: str, default: bool) -> bool:
    """A toggle kept across pages and in the URL, like every other setting."""
    value = box.toggle(label, kept(key, default, as_bool), key=key)
    keep(**{key: value})
    return value
