"""A server process's first run (ui/startup.py): the pages' imports and kernels made once, then frozen out of the
garbage collector that Streamlit runs after every rerun of every session (issue 22: sessions starve at start)."""

from __future__ import annotations

import gc
import sys
import threading

from conftest import ROOT
from streamlit.testing.v1 import AppTest

from ui import startup


def test_the_first_run_freezes_what_the_imports_made_and_later_runs_freeze_nothing(monkeypatch):
    started = []
    monkeypatch.setattr(startup, "_PREPARED", threading.Event())  # a fresh process
    monkeypatch.setattr(startup, "warm_kernels_in_background", lambda: started.append(1))
    try:
        startup.prepare_process()
        frozen = gc.get_freeze_count()
        assert started == [1] and all(name in sys.modules for name in startup.PAGE_MODULES)
        assert len(gc.get_objects()) < frozen // 10  # what a full collection still passes over
        sessions_objects = [[i] for i in range(10_000)]
        startup.prepare_process()
        assert started == [1] and gc.get_freeze_count() == frozen  # a session's objects stay collectable
        assert len(gc.get_objects()) >= len(sessions_objects)
    finally:
        gc.unfreeze()


def test_concurrent_first_runs_prepare_once(monkeypatch):
    started = []
    monkeypatch.setattr(startup, "_PREPARED", threading.Event())
    monkeypatch.setattr(startup, "warm_kernels_in_background", lambda: started.append(1))
    try:
        threads = [threading.Thread(target=startup.prepare_process) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert started == [1] and startup._PREPARED.is_set()
    finally:
        gc.unfreeze()


def test_a_page_opened_by_its_link_on_a_fresh_server_runs_through_app_py():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.switch_page("pages/learn.py")  # Streamlit's pages-folder mode: the page's file alone, as on a fresh server
    at.run()
    assert [t.value for t in at.sidebar.title] == ["MoE Cache Explorer"] and not at.exception
    assert at.session_state[startup.APP_RAN] and at.slider(key="learn_slider").value == 1
