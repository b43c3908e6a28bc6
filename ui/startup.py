"""What a server process does once, on its first run, before any page: the kernels compiled (in a subprocess on a
fresh install) or loaded, the pages' modules imported, and what that made frozen out of the garbage collector."""

from __future__ import annotations

import gc
import importlib
import threading

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from moe_model.charts import use_template_by_default
from moe_model.warmup import is_compiled, warm_up
from ui.cached import release_when_idle, warm_kernels_in_background

PAGE_MODULES = (  # the heavy imports of the pages beyond app.py's own
    "pandas",
    "plotly.graph_objects",
    "moe_model.charts",
    "moe_model.policies.stepper",
    "moe_model.routing.toy",
    "moe_model.answers.fit_advice",
    "moe_model.answers.policy_compare",
    "ui.session_logs",
    "ui.sidebar",
    "ui.tables",
    "ui.widgets",
)
_PREPARED = threading.Event()
_PREPARING = threading.Lock()


def prepare_process() -> None:
    """Once per process: compile or load the kernels, import what the pages use, then gc.freeze() all of it.

    Streamlit collects garbage after every rerun of every session (runner.postScriptGC): a full pass over the
    ~200k objects the imports make held the GIL 0.25-0.4 s each time here, stalling every other session; frozen,
    a pass sees the sessions' own objects only (0.02 s)."""
    with _PREPARING:
        if _PREPARED.is_set():
            return
        warm_kernels_in_background()
        use_template_by_default()
        for name in PAGE_MODULES:
            importlib.import_module(name)
        if is_compiled():
            warm_up()  # every kernel loaded from numba's cache now, not in a session waiting on numba's lock
        gc.freeze()
        release_when_idle()
        _PREPARED.set()


APP_RAN = "_app_ran"  # session_state: this session's runs have gone through app.py


def app_runs() -> None:
    """app.py's mark: this session's pages run through it (through_app has nothing to do)."""
    st.session_state[APP_RAN] = True


def through_app() -> None:
    """Run this page through app.py once per session. With a pages/ folder beside app.py, Streamlit runs a linked
    page's file alone (its first multipage mode) until app.py's st.navigation first runs in the process: a visitor
    opening a link on a fresh server got file-named pages, no page config and no prepare_process (no kernels)."""
    if not st.session_state.get(APP_RAN):
        PagesManager.uses_pages_directory = False  # what st.navigation sets: every run goes through app.py now
        app_runs()
        st.rerun()
