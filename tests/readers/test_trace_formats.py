"""Reading traces whole (NPZ token traces, recorded llama.cpp traces, CSV) and refusing hostile ones before any cast,
allocation or decompression (readers/trace_formats, trace_npz, trace_checks)."""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np
import pytest
from conftest import GROUNDTRUTH, SAMPLE, run_within
from trace_cases import labelled_trace

from moe_model.errors import WorkloadError
from moe_model.llama.batching import build_workload
from moe_model.readers.traces import (
    load_any,
    load_recorded,
    load_token_trace,
    make_token_trace,
    open_trace,
    save_npz,
    token_trace_from_csv,
)
from moe_model.workload import (
    PHASE_PROMPT,
    Batching,
)


def test_recorded_trace_keeps_each_layers_own_token_count():
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    prompt = work.rec_phase == PHASE_PROMPT
    assert work.rec_ntok[prompt].tolist() == [129] * 13 + [1]
    assert work.decode_tokens == 256


def test_csv_import_equals_the_npz_and_npz_export_round_trips(tmp_path):
    trace = labelled_trace([2, 3], n_layer=2)
    rows = ["seq,token,layer,e0,e1"]
    for s in range(trace.n_seq):
        for t in range(trace.seq_offsets[s], trace.seq_offsets[s + 1]):
            for layer in range(2):
                rows.append(f"{s},{t},{layer},{trace.experts[t, layer, 0]},{trace.experts[t, layer, 1]}")
    from_csv = token_trace_from_csv(io.StringIO("\n".join(rows)))
    assert np.array_equal(from_csv.experts, trace.experts) and np.array_equal(from_csv.seq_offsets, trace.seq_offsets)
    path = tmp_path / "t.npz"
    save_npz(path, trace)
    assert np.array_equal(load_token_trace(path).experts, trace.experts)
    work = build_workload(trace, Batching(concurrency=2), 256)
    save_npz(tmp_path / "w.npz", work)
    again = load_any(str(tmp_path / "w.npz"))
    assert np.array_equal(again.ids, work.ids) and np.array_equal(again.rec_ntok, work.rec_ntok)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not an npz", "not a readable NPZ"), (b"", "not a readable NPZ")],
)
def test_unreadable_trace_files_are_refused(content, message):
    with pytest.raises(WorkloadError, match=message):
        load_any(content, "x.npz")


@pytest.fixture()
def fifo(tmp_path):
    """A named pipe called trace.npz; opened for writing at the end so a reader blocked on it (the old code) ends."""
    path = tmp_path / "trace.npz"
    os.mkfifo(path)
    yield path
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading it
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("reader", [load_any, open_trace, load_token_trace, token_trace_from_csv])
def test_only_regular_files_are_read_as_traces(fifo, tmp_path, reader):
    # `--trace /dev/zero` took 7.5 GiB before a MemoryError; a FIFO hung the reader until someone wrote to it
    with pytest.raises(WorkloadError, match=r"/dev/zero is a device, not a regular file: only regular files are read"):
        run_within(30, reader, "/dev/zero")
    with pytest.raises(WorkloadError, match=r"trace.npz is a FIFO \(named pipe\), not a regular file"):
        run_within(30, reader, str(fifo))
    with pytest.raises(WorkloadError, match="is a folder, not a regular file"):
        run_within(30, reader, str(tmp_path))
    with pytest.raises(WorkloadError, match="no such trace file: .*missing.npz"):
        reader(str(tmp_path / "missing.npz"))


def test_bad_arrays_are_refused_with_the_reason():
    with pytest.raises(WorkloadError, match="n_tokens, n_layers, k"):
        make_token_trace(np.zeros((3, 2)))
    with pytest.raises(WorkloadError, match="seq_offsets"):
        make_token_trace(np.zeros((3, 2, 1), dtype=int), seq_offsets=[0, 5])
    with pytest.raises(WorkloadError, match="non-decreasing"):
        make_token_trace(np.zeros((3, 2, 1), dtype=int), ubatch=[0, 2, 1])
    with pytest.raises(WorkloadError, match="concurrency"):
        Batching(concurrency=0)


def test_a_corrupt_recorded_trace_is_refused_not_crashed(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, rec_ubatch=[0, 0], rec_layer=[0, 1], rec_ntok=[1, 5], rec_off=[0, 2], rec_k=[2, 2], ids=[1, 2, 3])
    with pytest.raises(WorkloadError, match="records outside"):
        load_any(str(path))
    np.savez(path, rec_ubatch=[0], rec_layer=[0], rec_ntok=[1], rec_off=[0], rec_k=[2], ids=[1, 2])
    assert load_any(str(path)).n_records == 1  # positive control


# --- hostile traces: refused before any cast, allocation or decompression ---


def test_an_expert_id_of_40000_is_refused_not_wrapped_by_the_int16_cast():
    experts = np.zeros((600, 48, 8), dtype=np.int64)
    assert make_token_trace(experts).experts.dtype == np.int16  # positive control
    for bad in (40_000, 65_536 + 3, -1):  # 40000 wraps negative in int16; 65539 would read as 3
        experts[7, 3, 2] = bad
        with pytest.raises(WorkloadError, match=r"expert ids must be in 0\.\.4,095"):
            make_token_trace(experts)


@pytest.mark.parametrize(
    ("shape", "message"),
    [((3, 2000, 1), "layers in the trace is 2,000, above this tool's limit"), ((3, 2, 100), "experts per token")],
)
def test_trace_shapes_beyond_any_real_model_are_refused(shape, message):
    with pytest.raises(WorkloadError, match=message):
        make_token_trace(np.zeros(shape, dtype=np.int16))


def test_a_recorded_trace_with_ids_that_would_wrap_in_int32_is_refused(tmp_path):
    path = tmp_path / "wrap.npz"
    arrays = {"rec_ubatch": [0], "rec_layer": [0], "rec_ntok": [1], "rec_off": [0], "rec_k": [2]}
    np.savez(path, **arrays, ids=np.array([1, 2], dtype=np.int64))
    assert load_any(str(path)).n_records == 1  # positive control
    np.savez(path, **arrays, ids=np.array([1, 2**32 + 3], dtype=np.int64))  # astype(int32) would read 3
    with pytest.raises(WorkloadError, match="expert ids must be in"):
        load_any(str(path))


def test_a_recorded_token_count_that_overflows_int64_is_refused(tmp_path):
    path = tmp_path / "overflow.npz"
    huge = np.array([2**62], dtype=np.int64)  # k * ntok wraps negative and would pass `<= len(ids)`
    np.savez(path, rec_ubatch=[0], rec_layer=[0], rec_ntok=huge, rec_off=[0], rec_k=[8], ids=[1, 2])
    with pytest.raises(WorkloadError, match="records outside"):
        load_any(str(path))


def test_an_npz_that_expands_beyond_the_limit_is_refused_before_decompressing(tmp_path, monkeypatch):
    import zipfile

    import moe_model.readers.trace_npz as trace_npz

    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, experts=np.zeros((4096, 48, 8), dtype=np.int16))  # 3 MiB of zeros, ~3 KB on disk
    assert path.stat().st_size < 50_000
    monkeypatch.setattr(trace_npz, "MAX_NPZ_BYTES", 1024**2)

    def no_decompression(*args, **kwargs):
        raise AssertionError("a member was decompressed before its size was checked")

    monkeypatch.setattr(zipfile.ZipFile, "open", no_decompression)
    with pytest.raises(WorkloadError, match="expands to 3,145,.* bytes, above this tool's limit"):
        load_any(str(path))


def _npz_with_member(name: str, header: dict, payload: bytes) -> bytes:
    """An NPZ whose one member has the given .npy header dict and data bytes (hand-built, possibly lying)."""
    import zipfile

    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, header)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(name, npy.getvalue() + payload)
    return buf.getvalue()


def test_an_npy_header_declaring_more_data_than_the_member_holds_is_refused():
    good = _npz_with_member("experts.npy", {"descr": "<i2", "fortran_order": False, "shape": (1, 1, 2)}, b"\1\0\2\0")
    assert load_any(good, "t.npz").n_expert == 3  # positive control
    lying = _npz_with_member("experts.npy", {"descr": "<i8", "fortran_order": False, "shape": (10**9, 48, 8)}, b"")
    with pytest.raises(WorkloadError, match="declares 3,072,000,000,000 bytes"):
        load_any(lying, "t.npz")


@pytest.mark.parametrize(("descr", "shown"), [("<f8", "float64"), ("|O", "object")])
def test_npz_members_that_are_not_integers_are_refused_unread(descr, shown):
    data = _npz_with_member("experts.npy", {"descr": descr, "fortran_order": False, "shape": (1, 1, 1)}, b"\0" * 8)
    with pytest.raises(WorkloadError, match=f"holds {shown}, not integers"):
        load_any(data, "t.npz")


@pytest.mark.parametrize(
    ("layer", "message"),
    [("-5", r"CSV layer indices must be in 0\.\.1,023"), ("99999", "CSV layer indices"), ("x", "must hold integers")],
)
def test_csv_layer_indices_are_range_checked_before_reshaping(layer, message):
    assert load_any(b"seq,token,layer,e0\n0,0,0,1\n", "t.csv").n_layer == 1  # positive control
    with pytest.raises(WorkloadError, match=message):
        load_any(f"seq,token,layer,e0\n0,0,{layer},1\n".encode(), "t.csv")


def test_an_npz_that_would_inflate_beyond_the_ratio_limit_is_refused_from_its_directory(npz_bomb, monkeypatch):
    import time
    import zipfile

    def no_decompression(*args, **kwargs):
        raise AssertionError("a member was opened before the archive's inflation was checked")

    monkeypatch.setattr(zipfile.ZipFile, "open", no_decompression)
    start = time.perf_counter()
    for reader in (load_any, open_trace):
        with pytest.raises(WorkloadError, match=r"would inflate 1,0\d\dx \(768,000,128 bytes from .*limit of 32x"):
            reader(str(npz_bomb))
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "path", sorted(SAMPLE.rglob("*.npz")), ids=lambda p: str(p.relative_to(SAMPLE)).replace("/", "_")
)
def test_every_bundled_trace_inflates_well_within_the_ratio_limit(path):
    from moe_model.limits import MAX_NPZ_INFLATION
    from moe_model.readers.trace_npz import npz_members, open_zip

    with open_zip(path) as archive:
        members = npz_members(archive)  # the check itself passes
    ratio = sum(m.file_size for m in members) / sum(m.compress_size for m in members)
    assert ratio < MAX_NPZ_INFLATION / 4  # measured 1.9 (token traces) to 5.0 (recorded)


def test_a_small_npz_is_read_at_any_ratio():
    buf = io.BytesIO()
    np.savez_compressed(buf, experts=np.zeros((4096, 48, 8), dtype=np.int16))  # 3 MiB of one id: ~1,000x
    assert load_any(buf.getvalue(), "t.npz").n_tokens == 4096
