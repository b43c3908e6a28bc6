"""Reading GGUF headers from paths, prefixes, file objects, URLs and shards; refusing hostile bytes."""

from __future__ import annotations

import contextlib
import http.server
import io
import itertools
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from conftest import GPT_OSS, GT_HEADER, QWEN235B_SHARD1, run_within
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType

from moe_model.errors import GGUFError, SourceError, TruncatedHeaderError
from moe_model.limits import HEADER_PREFIX_MIB
from moe_model.readers.gguf import SkippedArray, parse_header, read_header, read_model_headers
from moe_model.readers.gguf_writer import Scalar, StringArray, TypedArray, header_bytes
from moe_model.readers.http import CREDENTIALS_REFUSED, prefix_command
from moe_model.readers.model_spec import load_model
from moe_model.readers.sources import check_url
from moe_model.resources import data_path

TINY_META = {
    "general.architecture": "qwen3moe",
    "general.name": "tiny",
    "qwen3moe.block_count": 2,
    "qwen3moe.expert_count": 4,
    "qwen3moe.expert_used_count": 2,
    "qwen3moe.embedding_length": 256,
    "tokenizer.ggml.tokens": StringArray(["a", "bb", "ccc"]),
    "tokenizer.ggml.scores": TypedArray(GGUFValueType.FLOAT32, [0.0, 1.0, 2.0]),
}
TINY_TENSORS = [
    (f"blk.{il}.{kind}.weight", T.Q4_K, [256, 64, 4] if kind != "ffn_down_exps" else [256, 256, 4])
    for il in range(2)
    for kind in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
] + [("output.weight", T.Q6_K, [256, 3])]


def tiny() -> bytes:
    return header_bytes(TINY_META, TINY_TENSORS)


def test_tiny_header_round_trips_metadata_and_tensor_infos():
    header = parse_header(tiny())
    assert header.metadata["general.name"] == "tiny"
    assert header.metadata["tokenizer.ggml.tokens"] == SkippedArray("STRING", 3)
    assert header.metadata["tokenizer.ggml.scores"] == (0.0, 1.0, 2.0)
    assert [t.name for t in header.tensors][:3] == [
        "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_up_exps.weight",
        "blk.0.ffn_down_exps.weight",
    ]
    assert header.tensors[0].stride_bytes(2) == 64 * 144  # nb[2] = rows x row bytes of Q4_K
    assert header.header_bytes == len(tiny())


@pytest.mark.parametrize("cut", [0, 3, 4, 7, 12, 23, 40, 100, 250, -60, -9, -1])
def test_every_prefix_cut_raises_truncated_with_the_bytes_needed(cut):
    data = tiny()
    prefix = data[: cut % len(data)]
    with pytest.raises(TruncatedHeaderError) as info:
        parse_header(prefix)
    assert len(prefix) < info.value.needed_bytes <= len(data)
    assert "more" in str(info.value) and "head -c" in str(info.value)
    parse_header(data[: info.value.needed_bytes] + data[info.value.needed_bytes :])  # positive control


def test_all_cut_points_of_the_real_groundtruth_header_say_how_much_is_missing():
    data = GT_HEADER.read_bytes()
    for cut in range(0, len(data), 9973):
        with pytest.raises(TruncatedHeaderError) as info:
            parse_header(data[:cut])
        assert cut < info.value.needed_bytes <= len(data)
    assert parse_header(data).data_offset == 734_816 == len(data)  # tensor data starts there


def test_prefix_of_8_mib_reads_like_the_real_file():
    model = load_model(GT_HEADER.read_bytes() + b"\0" * 1000)
    assert model.expert_bytes_total == 1611 * 2**20


def test_a_file_object_prefix_is_read(tmp_path):
    assert parse_header(tiny()).tensors == read_header(io.BytesIO(tiny())).tensors


def test_a_short_file_on_disk_raises_truncated(tmp_path):
    path = tmp_path / "short.gguf"
    path.write_bytes(tiny()[:50])
    with pytest.raises(TruncatedHeaderError, match="need at least"):
        read_header(path)


def test_large_headers_are_read_in_growing_chunks_from_disk(tmp_path):
    meta = dict(TINY_META, **{"tokenizer.ggml.tokens": StringArray([f"token{i}" for i in range(400_000)])})
    path = tmp_path / "big.gguf"
    path.write_bytes(header_bytes(meta, TINY_TENSORS) + b"\0" * 4096)
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"].count == 400_000
    assert header.header_bytes > 2 * 2**20  # more than the first chunk


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\0" * 40, "not a GGUF file"),
        (b"GGUF" + struct.pack("<I", 1) + b"\0" * 40, "unsupported GGUF version 1"),
        (b"GGUF" + struct.pack(">I", 3) + b"\0" * 40, "big-endian"),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), "tensor count is 1,099,511,627,776, above this tool's limit"),
        (b"GGUF" + struct.pack("<IQQ", 3, 10**6, 0), "tensor count is 1,000,000, above this tool's limit of 20,000"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 10**6), "metadata entry count is 1,000,000, above this tool's limit"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**60), "a string of"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99),
            "unknown value type 99",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**50),
            "an array of",
        ),
    ],
)
def test_hostile_headers_raise_one_line_errors_quickly(data, message):
    with pytest.raises(GGUFError, match=message) as info:
        parse_header(data)
    assert "\n" not in str(info.value)
    assert not isinstance(info.value, TruncatedHeaderError)


def test_unknown_tensor_type_and_too_many_dims_are_refused():
    good = header_bytes({}, [("w", T.F32, [4])])
    assert parse_header(good).tensors[0].shape == (4,)  # positive control
    bad_type = good[:-12] + struct.pack("<IQ", 250, 0)
    with pytest.raises(GGUFError, match="unsupported GGUF tensor type 250"):
        parse_header(bad_type)
    with pytest.raises(GGUFError, match="5 dimensions"):
        parse_header(header_bytes({}, [("w", T.F32, [1, 1, 1, 1, 1])]))


def test_a_header_without_experts_is_refused_with_the_reason():
    with pytest.raises(GGUFError, match="MoE cache needs a MoE model"):
        load_model(header_bytes({"general.architecture": "llama", "llama.block_count": 2}, [("w", T.F32, [4])]))


def _tiny_with(**changes) -> bytes:
    """The tiny model's header with some metadata values replaced (keys without the arch prefix)."""
    meta = dict(TINY_META) | {f"qwen3moe.{k}" if "." not in k else k: v for k, v in changes.items()}
    return header_bytes(meta, TINY_TENSORS)


def test_a_block_count_of_2_to_the_32_is_refused_before_any_layer_is_built():
    assert load_model(_tiny_with()).n_layer == 2  # positive control
    data = _tiny_with(block_count=2**32 - 1)
    assert len(data) < 2000  # a few hundred bytes must not cost GiB
    with pytest.raises(GGUFError, match="block_count is 4,294,967,295, above this tool's limit of 1,024"):
        load_model(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"expert_count": Scalar(GGUFValueType.INT32, -8)}, "expert_count is -8: it cannot be negative"),
        ({"block_count": Scalar(GGUFValueType.INT32, -2)}, "block_count is -2: it cannot be negative"),
        ({"expert_used_count": Scalar(GGUFValueType.INT32, -1)}, "expert_used_count is -1: it cannot be negative"),
        ({"expert_used_count": 8}, "routes 8 experts per token but has only 4"),
        ({"expert_count": 10**6}, "expert_count is 1,000,000, above this tool's limit"),
        ({"expert_count": "many"}, "expert_count is 'many', not a number"),
    ],
)
def test_negative_absurd_or_inconsistent_expert_counts_are_refused(changes, message):
    with pytest.raises(GGUFError, match=message):
        load_model(_tiny_with(**changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": Scalar(GGUFValueType.INT64, -(10**12))}, "vocab_size is -1,000,000,000,000: it cannot be"),
        (
            {"qwen3moe.attention.head_count_kv": Scalar(GGUFValueType.INT64, -(10**6))},
            "head_count_kv is -1,000,000: it",
        ),
        (
            {"qwen3moe.attention.head_count_kv": TypedArray(GGUFValueType.INT32, [4, -1])},
            "head_count_kv is -1: it cannot",
        ),
        ({"embedding_length": Scalar(GGUFValueType.INT32, -256)}, "embedding_length is -256: it cannot be negative"),
        ({"qwen3moe.attention.key_length": 10**9}, "key_length is 1,000,000,000, above this tool's limit of 16,384"),
        (
            {"expert_feed_forward_length": Scalar(GGUFValueType.UINT64, 2**40)},
            "expert_feed_forward_length is 1,099,511,627,776, above",
        ),
        ({"general.file_type": Scalar(GGUFValueType.INT32, -1)}, "general.file_type is -1: it cannot be negative"),
        ({"vocab_size": "x" * 10**6}, "vocab_size is 'xxxx.*\\(1,000,002 characters\\), not a number$"),
    ],
)
def test_every_size_in_the_metadata_is_range_checked_where_it_is_read(changes, message):
    # vocab_size -10^12 once predicted -0.0002 t/s; head_count_kv -10^6 "fits in VRAM: -3,999,682 MiB used"
    assert load_model(_tiny_with(vocab_size=151_936)).n_vocab == 151_936  # positive control
    with pytest.raises(GGUFError, match=message) as info:
        load_model(_tiny_with(**changes))
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(("dim", "size"), [(0, 0), (1, 0), (2, 0), (2, 3)])
def test_an_expert_tensor_with_an_empty_dimension_or_other_expert_count_is_refused(dim, size):
    tensors = [
        (n, t, [size if i == dim else x for i, x in enumerate(sh)] if "exps" in n else sh) for n, t, sh in TINY_TENSORS
    ]
    with pytest.raises(GGUFError, match="expert tensor blk.0.ffn_gate_exps.weight (is not 3-D|holds 3 experts)"):
        load_model(header_bytes(TINY_META, tensors))  # an expert of 0 bytes once divided by zero in the slot plan


def test_a_10_mb_architecture_name_is_refused_without_being_quoted_whole():
    arch = "a" * 10**7
    meta = {k.replace("qwen3moe", arch): v for k, v in TINY_META.items()} | {"general.architecture": arch}
    with pytest.raises(
        GGUFError, match="general.architecture 'a{40}... .10,000,000 characters.' has 10,000,000"
    ) as info:
        load_model(header_bytes(meta, TINY_TENSORS))
    assert len(str(info.value)) < 200


def test_a_10_mb_model_name_is_kept_cut():
    name = load_model(_tiny_with(**{"general.name": "n" * 10**7})).name
    assert name.startswith("nnn") and name.endswith("... (10,000,000 characters)") and len(name) < 200


def test_a_huge_split_count_is_refused_before_any_shard_name_is_built(tmp_path):
    path = tmp_path / "m-00001-of-00002.gguf"
    path.write_bytes(_tiny_with(**{"split.count": Scalar(GGUFValueType.UINT64, 10**12), "split.no": 0}))
    with pytest.raises(GGUFError, match="split.count .* is 1,000,000,000,000, above this tool's limit of 1,024"):
        read_model_headers(path)


# --- split models ---


def test_split_model_combines_the_tensor_infos_of_every_shard():
    headers = read_model_headers(QWEN235B_SHARD1)
    assert len(headers) == 3
    model = load_model(QWEN235B_SHARD1)
    assert model.n_layer == 94 and all(layer.has_experts for layer in model.layers)


def test_split_model_from_bytes_asks_for_the_path():
    with pytest.raises(GGUFError, match="shard 1 of a 3-shard model"):
        load_model(QWEN235B_SHARD1.read_bytes())


def test_a_missing_shard_is_reported(tmp_path):
    (tmp_path / QWEN235B_SHARD1.name).write_bytes(QWEN235B_SHARD1.read_bytes())
    with pytest.raises(GGUFError, match="no such file"):
        load_model(tmp_path / QWEN235B_SHARD1.name)


def _tiny_split(folder: Path, shard1: dict | None = None, shard2: dict | None = None, drop_layer_1=False) -> Path:
    """The tiny model as 2 shards (layer 0 and the output in shard 1, layer 1 in shard 2), each shard's split
    metadata replaced by `shard1` / `shard2` where given; the path of shard 1."""
    layer_1 = [t for t in TINY_TENSORS if t[0].startswith("blk.1.")]
    parts = ([t for t in TINY_TENSORS if t not in layer_1], [] if drop_layer_1 else layer_1)
    u16 = GGUFValueType.UINT16
    for i, (tensors, changes) in enumerate(zip(parts, (shard1, shard2), strict=True)):
        split = {"split.no": Scalar(u16, i), "split.count": Scalar(u16, 2), "split.tensors.count": len(TINY_TENSORS)}
        meta = TINY_META | split | (changes or {}) if i == 0 else split | (changes or {})
        (folder / f"tiny-{i + 1:05d}-of-00002.gguf").write_bytes(header_bytes(meta, tensors))
    return folder / "tiny-00001-of-00002.gguf"


@pytest.mark.parametrize(
    ("split", "message"),
    [
        (
            {"shard1": {"split.count": 1}},
            "tiny-00001-of-00002.gguf is named one of 2 shards but its header says "
            "split.count = 1: a damaged shard, or one of another split",
        ),
        ({"shard1": {"split.count": 0}}, "corrupt GGUF header: split.count is 0: a model has a shard"),
        ({"drop_layer_1": True}, "the 2 shards hold 4 tensors but their headers say split.tensors.count = 7"),
        (
            {"drop_layer_1": True, "shard1": {"split.tensors.count": 4}, "shard2": {"split.tensors.count": 4}},
            "layer 1 of 2 .1 in all. has no tensors in any of the 2 shards: a shard is damaged or of another model",
        ),
        (
            {"shard2": {"split.no": 0}},
            r"shard 2 of 2 \(tiny-00002-of-00002.gguf\) says it is split.no = 0 of "
            r"split.count = 2, not 1 of 2: a shard of another split, or a damaged one",
        ),
        ({"shard2": {"split.no": 7}}, "says it is split.no = 7 of split.count = 2, not 1 of 2"),
        ({"shard2": {"split.count": 3}}, "says it is split.no = 1 of split.count = 3, not 1 of 2"),
    ],
    ids=[
        "count 1",
        "count 0",
        "missing layer",
        "missing layer, counts edited",
        "duplicate no",
        "no out of range",
        "other count",
    ],
)
def test_shards_that_disagree_are_refused_in_one_line(tmp_path, split, message):
    """Issue 39: each of these was planned as if whole, without a word."""
    assert load_model(_tiny_split(tmp_path)).n_layer == 2  # positive control: the sound split
    with pytest.raises(GGUFError, match=message) as err:
        load_model(_tiny_split(tmp_path, **split))
    assert "\n" not in str(err.value)


# --- URLs, against a real local HTTP server ---


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with single-range support (http.server has none); counts the bytes it sends."""

    honour_ranges = True
    bytes_sent = 0
    stall: tuple[str, ...] = ()  # paths answered only once `released` is set: a server that stops answering
    released = threading.Event()

    def do_GET(self):  # noqa: N802 - http.server API
        if self.path.endswith(self.stall):
            self.released.wait()
        if self.path.startswith("/go?"):  # /go?TARGET redirects to TARGET
            self.send_response(302)
            self.send_header("Location", urllib.parse.unquote(self.path[4:]))
            self.end_headers()
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        header = self.headers.get("Range")
        if header and self.honour_ranges:
            start, end = (int(x) for x in header.removeprefix("bytes=").split("-"))
            body = data[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        type(self).bytes_sent += len(body)  # before writing: a client that has the bytes always sees them counted
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a reader may hang up once it has enough
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def http_dir(tmp_path):
    handler = type("Handler", (RangeHandler,), {"bytes_sent": 0, "released": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}", handler
    handler.released.set()
    server.shutdown()
    server.server_close()


def test_url_reads_only_the_header_with_range_requests(http_dir):
    root, url, handler = http_dir
    (root / "model.gguf").write_bytes(GT_HEADER.read_bytes() + b"\0" * (6 * 2**20))
    model = load_model(f"{url}/model.gguf")
    assert model.expert_bytes_total == 1611 * 2**20
    assert handler.bytes_sent == 2 * 2**20  # one 2 MiB range, not the 6.7 MB file


def test_url_split_model_reads_every_shard(http_dir):
    root, url, _ = http_dir
    for path in QWEN235B_SHARD1.parent.glob("Qwen3-235B*"):
        (root / path.name).write_bytes(path.read_bytes())
    assert load_model(f"{url}/{QWEN235B_SHARD1.name}").n_layer == 94


def test_url_server_that_ignores_ranges_is_refused_with_a_prefix_command_that_works_there(http_dir, tmp_path):
    root, url, handler = http_dir
    handler.honour_ranges = False
    (root / "model.gguf").write_bytes(GPT_OSS.read_bytes() + b"\0" * (HEADER_PREFIX_MIB + 4) * 2**20)
    with pytest.raises(GGUFError) as refused:
        read_header(f"{url}/model.gguf")
    command = f"curl -sL {url}/model.gguf | head -c {HEADER_PREFIX_MIB}M > header.gguf"
    assert str(refused.value) == (
        f"127.0.0.1 does not honour HTTP Range requests (status 200), so `curl -r` would download the whole file: "
        f"stream its start instead, `{command}` (curl stops once head has {HEADER_PREFIX_MIB} MiB), and upload "
        "that prefix"
    )
    if shutil.which("curl") is None:
        pytest.skip("no curl to run the advised command")
    subprocess.run(command, shell=True, cwd=tmp_path, check=False, timeout=60)  # curl exits 23 once head is done
    prefix = (tmp_path / "header.gguf").read_bytes()
    assert len(prefix) == HEADER_PREFIX_MIB * 2**20 and read_header(prefix).header_bytes == GPT_OSS.stat().st_size


def test_the_advised_prefix_holds_every_bundled_header_four_times_over():
    largest = max(read_header(str(p)).header_bytes for p in data_path("models").parent.rglob("*.gguf"))
    assert largest == GPT_OSS.stat().st_size == 3_737_954  # gpt-oss-20b: a 200k-token vocabulary
    assert 4 * largest <= HEADER_PREFIX_MIB * 2**20
    assert prefix_command() == f"head -c {HEADER_PREFIX_MIB}M model.gguf > header.gguf"


def test_url_404_is_a_clear_error(http_dir):
    _, url, _ = http_dir
    with pytest.raises(GGUFError, match="HTTP 404"):
        read_header(f"{url}/missing.gguf")


def test_a_400_gb_file_opens_from_its_header_alone(tmp_path):
    path = tmp_path / "huge.gguf"
    with path.open("wb") as f:
        f.write(GT_HEADER.read_bytes())
        f.truncate(400 * 10**9)  # sparse: no disk used, but a reader that maps or reads it all would crawl
    assert path.stat().st_size == 400 * 10**9
    assert load_model(path).expert_bytes_total == 1611 * 2**20


def test_version_2_headers_are_read_like_version_3():
    data = bytearray(tiny())
    data[4:8] = struct.pack("<I", 2)
    assert parse_header(bytes(data)).version == 2 and len(parse_header(bytes(data)).tensors) == len(TINY_TENSORS)


def nested_arrays(depth: int) -> bytes:
    """One metadata entry: an array of one array of ... of an empty uint8 array, `depth` levels deep."""
    body = struct.pack("<IQ", GGUFValueType.ARRAY, 1) * (depth - 1) + struct.pack("<IQ", GGUFValueType.UINT8, 0)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9) + body


def test_arrays_nested_5000_deep_are_refused_in_one_line_without_recursion():
    assert parse_header(nested_arrays(3)).metadata["k"] == SkippedArray("ARRAY", 1)  # positive control
    with pytest.raises(GGUFError, match="arrays nested deeper than 16") as info:
        parse_header(nested_arrays(5000))  # 60 KB: once a RecursionError
    assert "\n" not in str(info.value)


def test_the_not_gguf_message_never_echoes_the_file_bytes():
    with pytest.raises(GGUFError, match="not a GGUF file") as info:
        parse_header(b"root:$6$secret:19000:0:99999:7:::\n")
    assert "root" not in str(info.value)


def test_url_redirects_are_followed_only_to_http_and_each_target_is_checked(http_dir):
    root, url, _ = http_dir
    (root / "model.gguf").write_bytes(tiny())
    assert read_header(f"{url}/go?{url}/model.gguf").metadata["general.name"] == "tiny"  # positive control
    with pytest.raises(GGUFError, match="refused a redirect from .*: not to http"):
        read_header(f"{url}/go?file:///etc/passwd")
    with pytest.raises(GGUFError, match="redirected to a URL that is not http"):
        read_header(f"{url}/go?ftp://{url[7:]}/model.gguf")
    seen = []

    def refuse_redirects(target: str) -> None:
        seen.append(target)
        if len(seen) > 1:
            raise SourceError("a private host")

    with pytest.raises(SourceError, match="a private host"):
        read_header(f"{url}/go?{url}/model.gguf", check_url=refuse_redirects)
    assert seen == [f"{url}/go?{url}/model.gguf", f"{url}/model.gguf"]


def test_a_refused_redirect_and_an_http_error_close_their_connection_before_the_error(http_dir, monkeypatch):
    root, url, _ = http_dir
    opened = []
    connect = socket.create_connection

    def recording(*args, **kwargs):
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(socket, "create_connection", recording)
    refused = (f"{url}/go?file:///etc/passwd", f"{url}/go?ftp://{url[7:]}/model.gguf", f"{url}/missing.gguf")
    errors = []  # held: a response left open would stay reachable from its traceback, not collected
    for target in refused + (f"{url}/go?" * 7 + "/model.gguf",):
        with pytest.raises(GGUFError) as info:
            read_header(target)
        errors.append(info)
    assert len(opened) >= 4 and [s.fileno() for s in opened] == [-1] * len(opened)


def test_a_redirect_loop_stops_with_one_line(http_dir):
    _, url, _ = http_dir
    with pytest.raises(GGUFError, match="refused a redirect") as info:
        read_header(f"{url}/go?/go?/go?/go?/go?/go?/go?/model.gguf")
    assert "\n" not in str(info.value)


def test_only_http_urls_are_fetched():
    with pytest.raises(GGUFError, match="no such file"):
        read_header("ftp://example.com/model.gguf")  # not a URL this reader fetches: read as a (missing) path


# --- connect and read timeouts, and connections only to the addresses that were checked ---


def test_a_server_that_accepts_but_never_answers_hits_the_read_timeout_in_one_line():
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever reads or writes
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/model.gguf"
        start = time.monotonic()
        with pytest.raises(GGUFError) as info:
            read_header(url, timeouts=(5.0, 0.3))
    assert str(info.value) == "127.0.0.1 sent nothing for 0.3 s (read timeout)"
    assert time.monotonic() - start < 4  # the read timeout, not the connect one


def test_a_host_that_never_accepts_hits_the_connect_timeout_in_one_line(monkeypatch):
    dialled = []

    def never_connects(address, timeout=None, *args, **kwargs):
        dialled.append((address, timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_connects)
    with pytest.raises(GGUFError) as info:
        read_header("http://slow.example:8080/model.gguf", timeouts=(2.5, 30.0))
    assert str(info.value) == "cannot connect to slow.example within 2.5 s (connect timeout)"
    assert dialled == [(("slow.example", 8080), 2.5)]


def test_a_second_dns_answer_cannot_send_the_connection_to_a_private_address(monkeypatch):
    answers = iter(["93.184.216.34", "127.0.0.1"])  # rebinding: public when checked, loopback afterwards

    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    dialled = []

    def refuse(address, timeout=None, *args, **kwargs):
        dialled.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(GGUFError, match="cannot read .*Connection refused"):
        read_header("http://rebind.example/model.gguf", check_url=check_url)
    assert dialled == [("93.184.216.34", 80)]  # the checked address, resolved once
    assert next(answers) == "127.0.0.1"  # the second answer was never asked for


def test_a_pinned_host_is_reached_at_its_checked_address_without_resolving_it_again(http_dir):
    root, url, _ = http_dir
    (root / "model.gguf").write_bytes(tiny())
    port = urllib.parse.urlsplit(url).port
    header = read_header(f"http://unresolvable.invalid:{port}/model.gguf", check_url=lambda _: ("127.0.0.1",))
    assert header.metadata["general.name"] == "tiny"


# --- credentials, and deadlines a dripping or stalling server cannot stretch ---


def test_a_url_with_credentials_is_refused_before_connecting_and_never_quoted(http_dir):
    root, url, handler = http_dir
    (root / "model.gguf").write_bytes(tiny())
    assert read_header(f"{url}/model.gguf").metadata["general.name"] == "tiny"  # positive control
    address = url.removeprefix("http://")
    for target in (
        f"http://user:s3cret@{address}/model.gguf",  # once connected to the host name "user:s3cret@127.0.0.1"
        f"http://s3cret@{address}/model.gguf",
        f"{url}/go?http://user:s3cret@{address}/model.gguf",  # a redirect to one
    ):
        with pytest.raises(GGUFError) as info:
            read_header(target)
        assert str(info.value) == CREDENTIALS_REFUSED
    assert handler.bytes_sent == len(tiny())  # the file went to the positive control only


@pytest.fixture()
def dripping_url():
    """A URL whose server sends one byte every 20 ms, without end: in its status line or in a 206 body."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket, where: str) -> None:
        head = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99999999/100000000\r\n"
        head += b"Content-Length: 100000000\r\n\r\n"
        with conn, contextlib.suppress(OSError):  # the client hangs up when it gives up
            conn.recv(65536)
            if where == "body":
                conn.sendall(head)
            for byte in head if where == "headers" else itertools.repeat(ord("G")):
                if stop.wait(0.02):
                    return
                conn.sendall(bytes([byte]))

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:  # closed at the end of the test
                return
            where = "headers" if len(threads) % 2 == 0 else "body"
            threads.append(threading.Thread(target=serve, args=(conn, where), daemon=True))
            threads[-1].start()

    threads: list[threading.Thread] = []
    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/model.gguf"
    stop.set()
    listener.close()


def test_a_server_dripping_bytes_is_abandoned_at_the_deadline_in_one_line(monkeypatch, dripping_url):
    # each byte comes well within the read timeout: once still reading after 330 s although a read had 120 s
    monkeypatch.setattr("moe_model.readers.http.URL_DEADLINE_S", 1.0)
    for where in ("headers", "body"):  # the server drips its status line to the first connection, a body to the next
        start = time.monotonic()
        with pytest.raises(GGUFError) as info:
            run_within(30, read_header, dripping_url)
        assert str(info.value) == (
            "127.0.0.1 had not sent the header by the deadline (1 s for one read): too slow, abandoned"
        ), where
        assert time.monotonic() - start < 15, where  # the 1 s deadline, not the 30 s read timeout


def test_all_shards_of_a_model_share_one_deadline(http_dir, monkeypatch):
    # a split count of 1,024 once made 1,023 sequential reads, each with a deadline of its own
    root, url, handler = http_dir
    monkeypatch.setattr("moe_model.readers.gguf.MODEL_DEADLINE_S", 1.0)
    n = 20
    for i in range(n):
        split = {"split.count": Scalar(GGUFValueType.UINT16, n), "split.no": Scalar(GGUFValueType.UINT16, i)}
        (root / f"m-{i + 1:05d}-of-{n:05d}.gguf").write_bytes(_tiny_with(**split))
    first = f"{url}/m-00001-of-{n:05d}.gguf"
    assert len(read_model_headers(first)) == n  # positive control
    handler.stall = (f"m-00003-of-{n:05d}.gguf",)  # the third shard is never answered: each read waits
    with pytest.raises(GGUFError, match=r"by the deadline \(1 s for all shards of one model\): too slow"):
        run_within(30, read_model_headers, first, (2.0, 10.0))  # not the 10 s read timeout


def test_a_model_hashes_by_its_fields_once_and_a_pickle_carries_no_hash(gt_model):
    import dataclasses
    import pickle

    copy = dataclasses.replace(gt_model)
    assert copy == gt_model and hash(copy) == hash(gt_model)
    restored = pickle.loads(pickle.dumps(gt_model))
    assert "_hash" in vars(gt_model) and "_hash" not in vars(restored)
    assert restored == gt_model and hash(restored) == hash(gt_model)
