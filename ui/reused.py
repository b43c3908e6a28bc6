"""What a page built last run from the same inputs, kept in its session: Explore's Plotly figures cost 0.2 s of
a two-core machine to build, and a toggle that changes none of them (compare policies, best setting) rebuilt them
while its own answer was being computed. Inputs are the same objects (app_cached results come back as the same object
while cached) or equal values; one entry per slot, so the memory stays one set of figures a session."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pandas as pd
import streamlit as st

T = TypeVar("T")
SESSION_KEY = "_reused"


def reused(slot: str, inputs: tuple, build: Callable[[], T]) -> T:
    """build()'s value for `inputs`: the one this session's `slot` holds where its inputs were the same, else
    built now and held in their place."""
    held = st.session_state.setdefault(SESSION_KEY, {})
    last = held.get(slot)
    if last is not None and same_inputs(last[0], inputs):
        return last[1]
    value = build()
    held[slot] = (inputs, value)  # the inputs held too: an object's id is not reused while it lives
    return value


def same_inputs(old: tuple, new: tuple) -> bool:
    """Each input the same object or an equal value (frames by content; what cannot be compared is not the same)."""
    return len(old) == len(new) and all(a is b or _equal(a, b) for a, b in zip(old, new, strict=True))


def _equal(a, b) -> bool:
    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        return isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame) and a.equals(b)
    try:
        return type(a) is type(b) and bool(a == b)
    except (ValueError, TypeError):  # arrays inside: their comparison has no single truth value
        return False
