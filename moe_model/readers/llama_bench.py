"""llama-bench's output of a CPU-only run of the user's model (`llama-bench -m MODEL.gguf -ngl 0`) as a host record,
and the one entry that reads either file a user has of their CPU run (`read_host_input`).

llama-bench prints one row per test (tools/llama-bench/llama-bench.cpp at 0104b151, `struct test` and its printers):
`-o json` an array of objects, `-o jsonl` one object a line, the default `-o md` a table (`| model | size | params |
backend | threads | test | t/s |`, with `ngl`, `n_ubatch`, `nopo`, `dev` columns where not the default, and
`build: <commit> (<number>)` below). A `tgN` row is N decoded tokens (`tgN @ dD`: after D tokens of context), a
`ppN` row a prompt of N tokens; `t/s` (`avg_ts`) is the mean over the repetitions. The row a record takes: the thread
count whose first-depth decode is fastest, its smallest depth, and its prompt row of the most tokens there.
llama-bench does not print the core count: the record's `cores` is the threads it ran; nor the experts' types (the
header names them): `expert_types` is empty.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from moe_model.errors import one_line
from moe_model.limits import MAX_HOST_RECORD_BYTES, shown
from moe_model.readers.files import open_regular
from moe_model.readers.host_record import FORMAT, HostRecord, HostRecordError, host_record_from_dict
from moe_model.readers.model_spec import ModelSpec

CPU_BACKENDS = frozenset({"CPU", "BLAS", "ZenDNN"})  # llama-bench's markdown_printer: a CPU backend prints no ngl
SIZE_UNITS = {"MiB": 2**20, "GiB": 2**30}  # its markdown size column: %.2f MiB below 1 GiB, else GiB
TEST = re.compile(r"^(?:pp(\d+))?\+?(?:tg(\d+))?(?: @ d(\d+))?$")  # "pp512", "tg128", "pp512+tg128", "tg128 @ d4096"
BUILD = re.compile(r"^build: (\S+) \((\d+)\)\s*$", re.M)
NO_CPU_INFO = "a CPU the markdown table does not name"
HOW_TO = "run `llama-bench -m MODEL.gguf -ngl 0 -o json` (default tests pp512 and tg128)"


class LlamaBenchError(HostRecordError):
    """llama-bench output that is not one CPU-only run of one model with a decode and a prompt row."""


@dataclass(frozen=True)
class BenchRow:
    """One llama-bench test: its tokens, speed, and the run's settings."""

    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float
    n_threads: int | None
    n_ubatch: int
    n_gpu_layers: int | None  # None: the table printed no ngl column (a CPU backend)
    no_op_offload: bool
    devices: str
    backends: str
    cpu_info: str | None
    model: str
    model_size: int


@dataclass(frozen=True)
class HostInput:
    """What a user gave as their CPU run, and which kind of file it was."""

    record: HostRecord
    kind: str  # "host record", "llama-bench JSON", "llama-bench JSONL", "llama-bench markdown"

    @property
    def described(self) -> str:
        r = self.record
        return (
            f"your CPU run ({self.kind}): {r.model_name} on {r.cpu_model}, {r.threads} threads, decode "
            f"{r.decode_tps:.1f} t/s, prompt {r.prompt_tps:.0f} t/s ({r.prompt_tokens:,} tokens), measured"
        )


def read_host_input(source: str | Path | bytes) -> HostInput:
    """A host record (`record --host-out`) or llama-bench's output (JSON, JSONL or markdown) of a CPU-only run,
    from a path or bytes; anything else is one line (HostRecordError)."""
    raw = source if isinstance(source, bytes) else _read_bounded(source)
    if len(raw) > MAX_HOST_RECORD_BYTES:
        raise HostRecordError(f"a host record or llama-bench output is at most {MAX_HOST_RECORD_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HostRecordError("not a host record or llama-bench output (not UTF-8 text)") from None
    parsed = _json_line(text) if text.lstrip().startswith("[") else _json(text)
    if isinstance(parsed, dict) and parsed.get("format") == FORMAT:
        return HostInput(host_record_from_dict(parsed), "host record")
    if isinstance(parsed, list):
        return HostInput(from_rows(*_json_rows(parsed)), "llama-bench JSON")
    if isinstance(parsed, dict):
        return HostInput(from_rows(*_json_rows([parsed])), "llama-bench JSONL")
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and all(line.lstrip().startswith("{") for line in lines):
        return HostInput(from_rows(*_json_rows([_json_line(line) for line in lines])), "llama-bench JSONL")
    if "|" in text:
        build = BUILD.search(text)
        return HostInput(from_rows(_markdown_rows(text), build and build.groups()), "llama-bench markdown")
    raise HostRecordError(f"not a host record (record --host-out) nor llama-bench output: {HOW_TO}")


def with_header_types(record: HostRecord, model: ModelSpec) -> HostRecord:
    """A llama-bench record names no expert types: the header's (its size still tells whether it timed this model)."""
    if record.source != "llama-bench" or record.expert_types:
        return record
    return replace(record, expert_types=tuple(sorted({t.type_name for layer in model.layers for t in layer.experts})))


def from_rows(rows: list[BenchRow], build: tuple[str, str] | None) -> HostRecord:
    """The host record of llama-bench's rows (module docstring: which rows it takes); `build` (commit, number)."""
    if not rows:
        raise LlamaBenchError(f"the llama-bench output has no test rows: {HOW_TO}")
    if len({(r.model, r.model_size) for r in rows}) > 1:
        raise LlamaBenchError("the llama-bench output times several models: give the rows of one model")
    for r in rows:
        _check_cpu_only(r)
    decode = [r for r in rows if r.n_gen and not r.n_prompt]
    if not decode:
        raise LlamaBenchError(f"the llama-bench output has no decode (tg) row: {HOW_TO}")
    first_depth = min(r.n_depth for r in decode)
    best = max((r for r in decode if r.n_depth == first_depth), key=lambda r: r.avg_ts)
    prompts = [r for r in rows if r.n_prompt and not r.n_gen and r.n_threads == best.n_threads]
    if not prompts:
        raise LlamaBenchError(f"the llama-bench output has no prompt (pp) row at {best.n_threads} threads: {HOW_TO}")
    low = min(r.n_depth for r in prompts)
    prompt = max((r for r in prompts if r.n_depth == low), key=lambda r: r.n_prompt)
    if best.n_threads is None:
        raise LlamaBenchError("the llama-bench table prints no threads column: run it again with -t N (your cores)")
    record = HostRecord(
        source="llama-bench",
        model_name=best.model or "not stated",
        model_file_bytes=max(1, best.model_size),
        expert_types=(),
        cpu_model=best.cpu_info or NO_CPU_INFO,
        cpu_cores=best.n_threads,
        threads=best.n_threads,
        decode_tps=best.avg_ts,
        decode_tokens=best.n_gen,
        decode_depth_tokens=best.n_depth,
        prompt_tps=prompt.avg_ts,
        prompt_tokens=prompt.n_prompt,
        n_ubatch=prompt.n_ubatch,
        runtime="llama-bench",
        llama_cpp=f"b{build[1]} ({build[0]})" if build else None,
    )
    return host_record_from_dict(record.as_dict())  # every field checked as a record file's are


def _check_cpu_only(r: BenchRow) -> None:
    """A CPU-only run: a CPU backend, or -ngl 0 (and -dev none or -nopo 1 for a prompt row: with a GPU backend
    llama.cpp offloads a large batch's matmuls to the GPU even at -ngl 0)."""
    on_cpu = set(r.backends.split(",")) <= CPU_BACKENDS or r.devices == "none"
    if on_cpu:
        return
    if r.n_gpu_layers != 0:
        layers = "not stated" if r.n_gpu_layers is None else r.n_gpu_layers
        raise LlamaBenchError(
            f"llama-bench ran on {shown(r.backends)} with -ngl {layers}: a CPU run is -ngl 0 (or a CPU-only build)"
        )
    if r.n_prompt and not r.no_op_offload:
        raise LlamaBenchError(
            f"llama-bench's prompt rows on {shown(r.backends)} at -ngl 0 use the GPU (op offload): add -nopo 1 or "
            "-dev none, or use a CPU-only build"
        )


def _read_bounded(path: str | Path) -> bytes:
    with open_regular(path, "host record", HostRecordError) as f:
        return f.read(MAX_HOST_RECORD_BYTES + 1)


def _json(text: str) -> object:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None


def _json_line(line: str) -> object:
    try:
        return json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise LlamaBenchError(f"llama-bench output (JSON) that is not JSON: {shown(one_line(err))}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number llama-bench prints")


def _json_rows(objects: list) -> tuple[list[BenchRow], tuple[str, str] | None]:
    """The rows of `-o json` / `-o jsonl` and the build the first names (commit, number)."""
    rows = [_json_row(o) for o in objects]
    first = objects[0] if objects else {}
    commit, number = first.get("build_commit"), first.get("build_number")
    build = (shown(str(commit), 40), str(number)) if commit and isinstance(number, int) else None
    return rows, build


def _json_row(row: object) -> BenchRow:
    """A row of `-o json` / `-o jsonl` (llama-bench's test::get_fields), each field used checked."""
    if not isinstance(row, dict):
        raise LlamaBenchError("a llama-bench JSON row is not an object")
    ts = row.get("avg_ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 < ts < 1e9:
        raise LlamaBenchError(f"a llama-bench row's avg_ts is not a speed: {shown(str(ts))}")
    path = str(row.get("model_filename") or "")
    return BenchRow(
        n_prompt=_whole(row, "n_prompt", 0),
        n_gen=_whole(row, "n_gen", 0),
        n_depth=_whole(row, "n_depth", 0),
        avg_ts=float(ts),
        n_threads=_whole(row, "n_threads", 1),
        n_ubatch=_whole(row, "n_ubatch", 1),
        n_gpu_layers=_whole(row, "n_gpu_layers", -(2**31)),
        no_op_offload=bool(row.get("no_op_offload")),
        devices=str(row.get("devices") or "auto"),
        backends=str(row.get("backends") or "CPU"),
        cpu_info=str(row.get("cpu_info") or "").strip()[:120] or None,
        model=str(row.get("model_type") or Path(path).name or "").strip()[:120],
        model_size=_whole(row, "model_size", 0),
    )


def _whole(row: dict, name: str, lo: int) -> int:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < 2**53:
        raise LlamaBenchError(f"a llama-bench row's {name} is not a whole number from {lo:,}: {shown(str(value))}")
    return value


def _markdown_rows(text: str) -> list[BenchRow]:
    """The rows of llama-bench's markdown table: the header names the columns, the dashes line follows it."""
    table = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    if len(table) < 2:
        raise LlamaBenchError(f"not a llama-bench table (no | model | ... | t/s | header): {HOW_TO}")
    names = _cells(table[0])
    if "test" not in names or "t/s" not in names:
        raise LlamaBenchError(f"not a llama-bench table (its header names no test and t/s columns): {HOW_TO}")
    rows = []
    for line in table[2:]:
        cells = _cells(line)
        if len(cells) != len(names):
            raise LlamaBenchError(f"a llama-bench table row has {len(cells)} cells, its header {len(names)}")
        rows.append(_markdown_row(dict(zip(names, cells, strict=True))))
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _markdown_row(cell: dict[str, str]) -> BenchRow:
    test = TEST.match(cell["test"])
    if not test or not any(test.groups()[:2]):
        raise LlamaBenchError(f"a llama-bench test name it does not print: {shown(cell['test'])}")
    n_prompt, n_gen, n_depth = (int(g) if g else 0 for g in test.groups())
    return BenchRow(
        n_prompt=n_prompt,
        n_gen=n_gen,
        n_depth=n_depth,
        avg_ts=_number(cell["t/s"].split("±")[0], "t/s"),
        n_threads=int(_number(cell["threads"], "threads")) if "threads" in cell else None,
        n_ubatch=int(_number(cell.get("n_ubatch", "512"), "n_ubatch")),  # the column shows only when not 512
        n_gpu_layers=int(_number(cell["ngl"], "ngl", signed=True)) if "ngl" in cell else None,
        no_op_offload=cell.get("nopo", "0") == "1",
        devices=cell.get("dev", "auto"),
        backends=cell.get("backend", "CPU"),
        cpu_info=None,
        model=cell.get("model", "")[:120],
        model_size=_size_bytes(cell.get("size", "")),
    )


def _number(text: str, column: str, signed: bool = False) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise LlamaBenchError(f"a llama-bench table's {column} is not a number: {shown(text.strip())}") from None
    if not (value > 0 or (signed and value > -(2**31))) or value >= 1e9:
        raise LlamaBenchError(f"a llama-bench table's {column} is out of range: {shown(text.strip())}")
    return value


def _size_bytes(text: str) -> int:
    """`17.28 GiB` as bytes (to llama-bench's two decimals); 0 where not printed."""
    number, _, unit = text.strip().partition(" ")
    if unit not in SIZE_UNITS:
        return 0
    return round(_number(number, "size") * SIZE_UNITS[unit])
