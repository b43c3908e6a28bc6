"""The app's caches (ui/cached.py): one store shared by every session, bounded in bytes and age, keyed by the
content of every input; uploads checked from their declared sizes before any array is built (issues 12, 22)."""

from __future__ import annotations

import inspect
import io
import re
import threading
import time
import tracemalloc
import zipfile
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import QWEN30B
from gguf import GGMLQuantizationType as T
from hostile_csv import hostile_csvs

from moe_model.errors import ReadStoppedError, WorkloadError
from moe_model.limits import APP_CACHE_BYTES, APP_CACHE_TTL_S, APP_LOG_BYTES, APP_MAX_LOOKUPS, APP_UPLOAD_PEAK_BYTES
from moe_model.llama.batching import build_workload
from moe_model.readers.gguf_writer import header_bytes
from moe_model.readers.model_spec import load_model, uniform_spec
from moe_model.readers.traces import load_any, make_token_trace, read_peak_bytes, save_npz
from moe_model.speed.scenario import Scenario
from ui import cached, cached_recommend
from ui.byte_cache import ByteBudgetCache, nbytes_of


def upload(i: int) -> bytes:
    """A distinct small GGUF header prefix, as a visitor would upload."""
    meta = {
        "general.architecture": "qwen3moe",
        "general.name": f"upload {i}",
        "qwen3moe.block_count": 2,
        "qwen3moe.expert_count": 8,
        "qwen3moe.expert_used_count": 2,
        "qwen3moe.embedding_length": 256,
    }
    tensors = [(f"blk.{il}.ffn_down_exps.weight", T.Q4_K, [256, 64, 8]) for il in range(2)]
    return header_bytes(meta, tensors)


def test_no_page_cache_bypasses_the_byte_bounded_store():
    source = inspect.getsource(cached)
    assert "@st.cache_data" not in source and "@st.cache_resource" not in source
    functions = [getattr(cached, name) for name in dir(cached) if hasattr(getattr(cached, name), "is_cached")]
    assert len(functions) >= 12
    assert cached.STORE.max_bytes == APP_CACHE_BYTES and cached.STORE.ttl_s == APP_CACHE_TTL_S


def test_distinct_results_stay_within_the_byte_budget_least_recently_used_out():
    store = ByteBudgetCache(max_bytes=8 * 2**20, entry_bytes=4 * 2**20, ttl_s=3600)
    for i in range(30):  # thirty visitors' distinct 1 MiB results
        store.get_or_compute(("upload", i), lambda: np.zeros(2**20, np.uint8))
    assert store.nbytes <= 8 * 2**20 and len(store) == 8
    assert store.lookup(("upload", 29))[0] and not store.lookup(("upload", 0))[0]


def test_a_result_larger_than_an_entry_is_served_but_not_kept():
    store = ByteBudgetCache(max_bytes=8 * 2**20, entry_bytes=2**20, ttl_s=3600)
    value, kept = store.get_or_compute(("big",), lambda: np.zeros(2 * 2**20, np.uint8))
    assert value.nbytes == 2 * 2**20 and not kept and len(store) == 0 and store.nbytes == 0


def test_an_expired_result_is_computed_again():
    store = ByteBudgetCache(max_bytes=2**20, entry_bytes=2**20, ttl_s=-1.0)  # everything is already too old
    calls = []
    for _ in range(2):
        store.get_or_compute(("k",), lambda: calls.append(1) or b"x")
    assert len(calls) == 2


def test_concurrent_callers_of_one_key_share_one_computation():
    store = ByteBudgetCache(max_bytes=2**20, entry_bytes=2**20, ttl_s=3600)
    release, calls, got = threading.Event(), [], []

    def compute():
        calls.append(1)
        release.wait(30)
        return object()

    threads = [threading.Thread(target=lambda: got.append(store.get_or_compute(("k",), compute)[0])) for _ in range(3)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(60)
    assert len(calls) == 1 and len({id(v) for v in got}) == 1


def test_a_key_being_computed_does_not_hold_a_caller_of_another_key():
    store = ByteBudgetCache(max_bytes=2**20, entry_bytes=2**20, ttl_s=3600)
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(60)
        return b"a"

    slow_caller = threading.Thread(target=store.get_or_compute, args=(("A",), slow))
    slow_caller.start()
    try:
        assert started.wait(30)
        assert store.get_or_compute(("B",), lambda: b"b") == (b"b", True)  # while A is still being computed
        assert not store.lookup(("A",))[0]
    finally:
        release.set()
        slow_caller.join(60)
    assert store.lookup(("A",)) == (True, b"a")


def test_a_failing_computation_fails_each_caller_with_its_own_error():
    store = ByteBudgetCache(max_bytes=2**20, entry_bytes=2**20, ttl_s=3600)
    errors = []
    for _ in range(2):
        with pytest.raises(WorkloadError) as err:
            store.get_or_compute(("bad",), lambda: (_ for _ in ()).throw(WorkloadError("refused")))
        errors.append(str(err.value))
    assert errors == ["refused", "refused"] and len(store) == 0


def stopped_session_spinner(monkeypatch) -> None:
    """st.spinner as a session that reran or closed meanwhile meets it: its exit's Streamlit call raises."""
    from contextlib import contextmanager

    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    @contextmanager
    def spinner(text, **kwargs):
        yield
        raise StopException()

    monkeypatch.setattr(cached.st, "spinner", spinner)


def test_a_result_finished_for_a_session_that_stopped_meanwhile_is_kept_for_the_others(monkeypatch):
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    stopped_session_spinner(monkeypatch)
    calls = []

    @cached.app_cached("Computing...")
    def slow_result(n: int) -> list[int]:
        calls.append(n)
        return [n]

    slow_result.clear()
    with pytest.raises(StopException):  # the session that asked has gone: it stops, its result stays
        slow_result(7)
    monkeypatch.undo()
    assert slow_result(7) == [7] and calls == [7]  # the next session finds it, not computed again
    slow_result.clear()


def test_a_cached_call_inside_a_shared_computation_shows_nothing_that_could_stop_it(monkeypatch):
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    stopped_session_spinner(monkeypatch)
    calls = []

    @cached.app_cached("Inner...")
    def inner(n: int) -> int:
        calls.append("inner")
        return n + 1

    @cached.app_cached("Outer...")
    def outer(n: int) -> int:
        calls.append("outer")
        return inner(n) * 2

    inner.clear(), outer.clear()
    with pytest.raises(StopException):  # only where the session waits, after the computation
        outer(1)
    monkeypatch.undo()
    assert outer(1) == 4 and inner(1) == 2 and calls == ["outer", "inner"]
    inner.clear(), outer.clear()


def test_a_workload_is_measured_by_its_arrays():
    work = build_workload(make_token_trace(np.zeros((1000, 4, 2), np.int16) + [0, 1]))
    arrays = sum(
        getattr(work, f).nbytes for f in ("rec_ubatch", "rec_layer", "rec_ntok", "rec_off", "rec_phase", "ids")
    )
    assert arrays <= nbytes_of(work) < arrays + 4096


def test_thirty_distinct_model_uploads_keep_the_store_bounded():
    cached.cached_model.clear()
    names = {cached.cached_model(upload(i)).name for i in range(30)}
    assert len(names) == 30 and cached.STORE.nbytes <= APP_CACHE_BYTES


def bomb(n_tokens: int) -> bytes:
    """A token-trace NPZ of zeros, deflated: ~0.1 % of its size on the wire."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("experts.npy", "w") as f:
        header = {"descr": "<i2", "fortran_order": False, "shape": (n_tokens, 48, 8)}
        np.lib.format.write_array_header_1_0(f, header)
        chunk = bytes(48 * 8 * 2 * 4096)
        for _ in range(n_tokens // 4096):
            f.write(chunk)
    return buf.getvalue()


def test_three_concurrent_uploads_of_one_npz_bomb_get_the_same_refusal_before_any_array_is_built(monkeypatch):
    import moe_model.readers.trace_npz as trace_npz

    monkeypatch.setattr(trace_npz, "MAX_NPZ_INFLATION", 10**6)  # the work bounds lifted: memory is still bounded
    monkeypatch.setattr(cached, "APP_REPLAY", replace(cached.APP_REPLAY, max_lookups=10**9))
    data = bomb(4096 * 40)  # 126 MiB of ids, 126 KiB on the wire: ~4.5 GiB once batched
    assert len(data) < 2**20 and read_peak_bytes(data, "bomb.npz") > APP_UPLOAD_PEAK_BYTES
    errors: list[str] = []

    def visit():
        try:
            cached.cached_trace(data, "bomb.npz", 128, Scenario())
        except WorkloadError as err:
            errors.append(str(err))

    tracemalloc.start()
    threads = [threading.Thread(target=visit) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(errors) == 3 and len(set(errors)) == 1 and "\n" not in errors[0]
    assert "above the app's limit" in errors[0]
    assert peak < 16 * 2**20  # nothing was inflated (the bomb is 126 MiB inside)


def test_the_768_mb_npz_bomb_is_refused_through_the_upload_path_in_under_5_s_naming_the_limit(npz_bomb):
    data = npz_bomb.read_bytes()
    start = time.perf_counter()  # read whole, this upload held a server thread for about a minute
    with pytest.raises(WorkloadError) as refused:
        cached.cached_trace(data, "bomb.npz", 128, Scenario())
    assert time.perf_counter() - start < 5 and "\n" not in str(refused.value)
    assert re.fullmatch(
        r"the NPZ would inflate 1,0\d\dx \(768,000,128 bytes from [\d,]+\), above this tool's "
        r"limit of 32x its zipped size",
        str(refused.value),
    )


def test_an_upload_above_the_apps_lookup_cap_is_refused_before_it_is_read():
    experts = np.random.default_rng(0).integers(0, 32, (177_084, 24, 4), dtype=np.int8)  # 17,000,064 ids
    buf = io.BytesIO()
    np.savez(buf, experts=experts)  # stored: 17 MB that inflate 1x
    data = buf.getvalue()
    assert read_peak_bytes(data, "big.npz") < APP_UPLOAD_PEAK_BYTES  # memory alone would let it through
    tracemalloc.start()
    with pytest.raises(WorkloadError) as refused:
        cached.cached_trace(data, "big.npz", 128, Scenario())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(refused.value) == (
        f"this trace holds 17,000,064 expert ids; the app replays at most {APP_MAX_LOOKUPS:,}; "
        "run the CLI for more (`python -m moe_model simulate --trace`)"
    )
    assert peak < 4 * 2**20  # refused from the header: no array was read


def test_an_upload_within_the_limit_is_read_and_shared(tmp_path):
    trace = make_token_trace(np.random.default_rng(0).integers(0, 8, (300, 2, 2)) + [0, 8])
    buf = io.BytesIO()
    save_npz(buf, trace)
    first = cached.cached_trace(buf.getvalue(), "t.npz", 16, Scenario())
    assert cached.cached_trace(buf.getvalue(), "t.npz", 16, Scenario()) is first  # shared, not a copy


def _trace_npz(seed: int) -> bytes:
    buf = io.BytesIO()
    save_npz(buf, make_token_trace(np.random.default_rng(seed).integers(0, 8, (300, 2, 2)) + [0, 8]))
    return buf.getvalue()


def test_a_second_sessions_small_upload_is_read_while_a_first_sessions_largest_one_is_being_read(monkeypatch):
    """No server-wide turn to wait for: the first session's read, as large as an upload may be, holds nothing the
    second needs (it waited up to two minutes, then "the server is reading other uploads")."""
    big, small = _trace_npz(1), _trace_npz(2)
    reading, second_done = threading.Event(), threading.Event()
    real = cached.load_trace

    def load(data, name, cap, should_stop=None):
        if name == "big.npz":
            reading.set()
            second_done.wait(120)  # held until the second session has its answer (a guard, not a timing)
        return real(data, name, cap, should_stop=should_stop)

    monkeypatch.setattr(cached, "load_trace", load)
    monkeypatch.setattr(cached, "check_upload_peak", lambda *args: APP_UPLOAD_PEAK_BYTES)  # the most allowed
    first = threading.Thread(target=cached.cached_trace, args=(big, "big.npz", 16, Scenario()))
    first.start()
    assert reading.wait(60)
    work = cached.cached_trace(small, "small.npz", 16, Scenario())
    still_reading = first.is_alive()
    second_done.set()
    first.join()
    assert still_reading and work.n_layer == 2


def test_a_read_stops_when_its_session_stops_and_goes_on_through_a_rerun(monkeypatch):
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequests

    requests = ScriptRequests()
    session = SimpleNamespace(script_requests=requests)
    monkeypatch.setattr(cached, "get_script_run_ctx", lambda suppress_warning=False: session)
    stopped = cached.session_stopped()
    assert not stopped()
    requests.request_rerun(RerunData())  # a widget moved: the next run wants the same upload
    assert not stopped()
    requests.request_stop()  # the tab closed
    assert stopped()
    monkeypatch.setattr(cached, "get_script_run_ctx", lambda suppress_warning=False: None)
    assert not cached.session_stopped()()  # outside a script run (the CLI, a test): nothing stops it


def test_a_log_above_the_app_limit_is_refused_before_parsing():
    with pytest.raises(WorkloadError, match="above the app's limit"):
        cached.cached_log(b"x" * (APP_LOG_BYTES + 1))


def test_a_changed_workload_under_the_same_hand_built_name_misses_the_cache():
    cached._workload_npz.clear()
    rng = np.random.default_rng(0)
    hot = build_workload(make_token_trace(np.tile(np.array([[0, 1], [0, 1]], dtype=np.int16), (200, 1, 1))))
    spread = build_workload(make_token_trace(np.argsort(rng.random((200, 2, 8)), axis=2)[:, :, :2]))
    first, second = cached.workload_npz(hot, "same key")(), cached.workload_npz(spread, "same key")()
    assert first != second  # keyed by content: the stale workload is not served
    assert cached.workload_npz(hot, "another key")() == first


def test_the_workload_download_is_compressed_when_clicked_not_when_the_page_is_drawn(monkeypatch):
    cached._workload_npz.clear()
    saved = []
    monkeypatch.setattr(cached, "save_npz", lambda buf, work: saved.append(work) or save_npz(buf, work))
    work = build_workload(make_token_trace(np.tile(np.array([[0, 1], [0, 1]], dtype=np.int16), (50, 1, 1))))
    data = cached.workload_npz(work, "key")  # what the page hands st.download_button
    assert callable(data) and saved == []
    assert load_any(data(), "w.npz").n_records == work.n_records and len(saved) == 1


def test_an_edited_preset_file_misses_the_synthetic_cache(tmp_path, monkeypatch):
    presets = tmp_path / "synthetic_presets.json"
    presets.write_text((cached.PRESETS_PATH).read_text())
    monkeypatch.setattr(cached, "PRESETS_PATH", presets)
    model = load_model(QWEN30B)
    calls = []
    monkeypatch.setattr(cached, "cached_batched_synthetic", lambda *args: calls.append(args[-1]))
    cached.cached_synthetic(model, Scenario())
    presets.write_text(presets.read_text() + "\n")
    cached.cached_synthetic(model, Scenario())
    assert len(set(calls)) == 2  # the preset file's content is part of the key


@pytest.mark.parametrize("n_tokens", [600, 1200])
def test_the_synthetic_cache_key_includes_the_token_count(n_tokens):
    model = uniform_spec(2, 8, 2)
    work = cached.cached_synthetic(model, Scenario(), 0, n_tokens)
    assert work.decode_tokens == n_tokens


def test_explores_inputs_are_keyed_by_their_content_and_a_point_is_computed_once(monkeypatch):
    from dataclasses import replace

    from moe_model.fits.calibration import default_time_model
    from moe_model.speed.hardware import preset

    model, tm = uniform_spec(2, 8, 2), default_time_model()
    work = cached.cached_synthetic(model, Scenario(), 0, 600)
    inputs = cached.Inputs(model, work, preset("t4"), tm)
    same = cached.Inputs(uniform_spec(2, 8, 2), work, preset("t4"), replace(tm))  # equal content, other objects
    other = replace(inputs, hw=preset("t4").with_changes(ram_gib=8.0))
    assert cached.key_part(inputs) == cached.key_part(same) != cached.key_part(other)
    calls, real = [], cached.explore_answer
    monkeypatch.setattr(cached, "explore_answer", lambda *a, **k: calls.append(a) or real(*a, **k))
    cached.cached_explore_answer.clear()
    ranges = tm.ranges((1.0, 0.0))
    first = cached.cached_explore_answer(inputs, Scenario(), ranges, 100)
    assert cached.cached_explore_answer(same, Scenario(), ranges, 100) is first and len(calls) == 1
    assert cached.cached_explore_answer(other, Scenario(), ranges, 100) is not first and len(calls) == 2


def test_explore_and_the_recommender_batch_one_generated_routing(monkeypatch):
    from moe_model.pricing import workloads

    model, generated, real = uniform_spec(2, 8, 2), [], workloads.generate_stored
    monkeypatch.setattr(workloads, "generate_stored", lambda *a, **k: generated.append(a) or real(*a, **k))
    for cache in (cached.synthetic_tokens, cached.cached_batched_synthetic, cached_recommend.recommend_memo):
        cache.clear()
    explore = cached.cached_synthetic(model, Scenario(), 64)  # with prompts, as Explore asks
    memo = cached_recommend._memo(model, Scenario(), None, None)  # decode only: recommend
    assert len(generated) == 1  # the two pages open together on a fresh server: one generation, two batchings
    assert explore.decode_tokens == memo.work.decode_tokens and explore.n_records > memo.work.n_records


def test_explore_and_the_recommender_replay_into_one_memo_per_workload():
    model = uniform_spec(2, 8, 2)
    explore = cached.replay_memo(cached.cached_synthetic(model, Scenario()))  # decode only, as Explore asks
    assert cached_recommend._memo(model, Scenario(), None, None) is explore


def test_the_shared_results_go_once_no_session_has_been_connected_for_the_idle_time():
    store = ByteBudgetCache(2**20, 2**20, 3600)
    store.get_or_compute(("k",), lambda: np.zeros(1000))
    idle = cached.IdleRelease(store, idle_s=30)
    assert not idle.step(0, True)
    assert not idle.step(100, False)  # the last session just left
    assert not idle.step(129, False) and len(store) == 1
    assert not idle.step(140, True)  # one came back: the wait starts again when it leaves
    assert not idle.step(150, False) and len(store) == 1
    assert idle.step(180, False) and len(store) == 0 and store.nbytes == 0
    assert not idle.step(300, False)  # nothing left to release


def test_an_apptest_page_run_is_not_a_server_left_alone():
    """AppTest runs a page with a stand-in runtime (a mock) whose state is no RuntimeState: the idle watch read it as
    a server nobody was connected to and, after 30 s of a test process's page runs, emptied the shared store in the
    middle of one (two CI runs failed so: Explore's answer was gone before the test's second run)."""
    from streamlit.runtime import Runtime
    from test_app import open_page

    seen, done = [], threading.Event()

    def look() -> None:
        while not done.is_set():
            if Runtime.exists():
                seen.append(cached.connected_sessions())
            time.sleep(0.01)

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    try:
        open_page("pages/learn.py")
    finally:
        done.set()
        watcher.join()
    assert seen and set(seen) == {None}


def test_the_idle_release_waits_for_no_idle_time_outside_a_server():
    store = ByteBudgetCache(2**20, 2**20, 3600)
    store.get_or_compute(("k",), lambda: np.zeros(1000))
    idle = cached.IdleRelease(store, idle_s=30)
    assert cached.connected_sessions() is None  # this process serves no page
    assert not idle.step(0, None) and not idle.step(100, None) and len(store) == 1
    assert not idle.step(200, False) and not idle.step(229, None) and not idle.step(259, False) and len(store) == 1
    assert idle.step(289, False) and len(store) == 0  # a server's 30 s, counted from its own first idle look


@pytest.mark.parametrize("kind", ["10^7 columns", "100,003 fields"])
def test_a_hostile_csv_upload_is_refused_in_one_line_before_the_app_reads_it(tmp_path, kind):
    data = hostile_csvs(tmp_path)[kind].read_bytes()
    tracemalloc.start()
    with pytest.raises(WorkloadError) as refused:
        cached.cached_trace(data, "t.csv", 128, Scenario())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = str(refused.value)
    assert "\n" not in message and ("column" in message or "field" in message), message
    assert peak < 300 * 2**20  # the bound (it took 1.2-4.7 GiB); the file itself is held outside


def test_a_read_whose_session_stopped_ends_with_one_line(tmp_path):
    rows = "\n".join(f"0,{t},{layer},1,2" for t in range(200) for layer in range(2))
    data = f"seq,token,layer,e0,e1\n{rows}\n".encode()
    with pytest.raises(ReadStoppedError):
        cached._cached_trace(data, "t.csv", 16, Scenario(), _should_stop=lambda: True)
    assert cached.cached_trace(data, "t.csv", 16, Scenario()).n_layer == 2  # nothing stale kept: read again whole


def test_the_idle_release_empties_every_sessions_large_results_too():
    large = cached._new_session_results()
    large["f"] = (("key",), np.zeros(1000))
    idle = cached.IdleRelease(ByteBudgetCache(2**20, 2**20, 3600), idle_s=30)
    assert not idle.step(0, False) and large
    assert idle.step(30, False) and not large  # a closed session's, kept by Streamlit for a reconnect: recomputed


def test_the_idle_release_takes_back_the_workload_a_closed_sessions_download_button_holds():
    """Streamlit keeps a closed session's download callables until the server ends: the one for Explore's workload
    held the workload (38 MiB for a 50k-token upload) after every session had gone (issue 39)."""
    experts = np.random.default_rng(0).integers(0, 8, size=(64, 2, 1))
    work = build_workload(make_token_trace(np.concatenate([experts, (experts + 1) % 8], axis=2)))
    download = cached.workload_npz(work, "synthetic")
    assert download()[:2] == b"PK"  # an NPZ, made when clicked
    idle = cached.IdleRelease(ByteBudgetCache(2**20, 2**20, 3600), idle_s=30)
    assert not idle.step(0, False) and download.work is work
    assert idle.step(30, False) and download.work is None
    with pytest.raises(WorkloadError, match="released while nobody was connected: reload the page"):
        download()


def test_the_idle_release_drops_streamlits_copies_of_every_sessions_uploaded_files(monkeypatch):
    """Streamlit drops a closed session's uploaded files only when it shuts the session down, which one that outlives
    its reconnect time never is; once nobody is connected the idle release drops them (a session keeps its own)."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.runtime import RuntimeState
    from streamlit.runtime.uploaded_file_manager import UploadedFileRec

    files = MemoryUploadedFileManager("/_stcore/upload_file")
    for session in ("closed-1", "closed-2"):
        files.add_file(session, UploadedFileRec("f", "t.npz", "application/octet-stream", b"x" * 1000))
    monkeypatch.setattr(Runtime, "exists", staticmethod(lambda: True))
    # ui.background's look and this process's idle watch, looking meanwhile, see a server with its sessions
    connected = RuntimeState.ONE_OR_MORE_SESSIONS_CONNECTED
    runtime = SimpleNamespace(uploaded_file_mgr=files, is_active_session=lambda _sid: True, state=connected)
    monkeypatch.setattr(Runtime, "instance", staticmethod(lambda: runtime))
    large = cached._new_session_results()
    large["f"] = (("key",), np.zeros(10))  # something to release
    idle = cached.IdleRelease(ByteBudgetCache(2**20, 2**20, 3600), idle_s=30)
    assert not idle.step(0, False) and files.file_storage
    assert idle.step(30, False) and not files.file_storage


def test_explores_charts_are_reused_by_a_toggle_that_changes_none_of_them_and_rebuilt_by_a_budget():
    from test_app import open_page

    at = open_page("pages/explore.py")
    figures = at.session_state["_reused"]["explore:charts"][1]
    at.toggle(key="compare_policies").set_value(True).run()
    assert not at.exception and at.session_state["_reused"]["explore:charts"][1] is figures
    at.slider(key="budget").set_value(6000).run()
    assert not at.exception and at.session_state["_reused"]["explore:charts"][1] is not figures


def test_reused_inputs_are_the_same_objects_or_equal_values_frames_by_content():
    import pandas as pd

    from ui.reused import same_inputs

    frame, view = pd.DataFrame({"a": [1.0]}), object()
    assert same_inputs((view, frame, 7, "x", None), (view, frame.copy(), 7, "x", None))
    assert not same_inputs((view,), (object(),)) and not same_inputs((frame,), (frame + 1,))
    assert not same_inputs((np.zeros(3),), (np.zeros(3),))  # no single truth value: not the same
    assert not same_inputs((1,), (1.0,)) and not same_inputs((frame,), (None,)) and not same_inputs((1,), (1, 2))


def test_explore_releases_a_curve_it_will_not_draw_before_it_computes_its_answer(monkeypatch):
    from test_app import open_page

    from ui import background

    at = open_page("pages/explore.py")
    before = {slots["explore:curve"] for slots in background._WANTED.values() if "explore:curve" in slots}
    wanted_at_answer = []
    real = cached.cached_explore_answer

    def answer(*args, **kwargs):
        wanted_at_answer.append({s.get("explore:curve") for s in background._WANTED.values()})
        return real(*args, **kwargs)

    monkeypatch.setattr(cached, "cached_explore_answer", answer)
    at.slider(key="np").set_value(3).run()
    assert not at.exception and before and wanted_at_answer
    assert not before & wanted_at_answer[0]  # -np 1's curve no longer wanted when -np 3's answer is computed
