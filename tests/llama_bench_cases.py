"""llama-bench outputs written by hand the way its printers write them (tools/llama-bench/llama-bench.cpp at
0104b151: test::get_fields, json_printer, jsonl_printer, markdown_printer), for the reader's and the CLI's tests."""

from __future__ import annotations

import json

MODEL_TYPE = "qwen3moe 30B.A3B Q4_K - Medium"
MODEL_SIZE = 17_280_000_000
CPU = "AMD Ryzen 7 7700X 8-Core Processor"


def row(n_prompt: int, n_gen: int, avg_ts: float, **changes) -> dict:
    """One test's fields in get_fields' order, as a CPU-only build at -ngl 0 prints them."""
    fields = {
        "build_commit": "0104b151",
        "build_number": 7150,
        "cpu_info": CPU,
        "gpu_info": "",
        "backends": "CPU",
        "model_filename": "/models/Qwen3-30B-A3B-Q4_K_M.gguf",
        "model_type": MODEL_TYPE,
        "model_size": MODEL_SIZE,
        "model_n_params": 30_532_122_624,
        "n_batch": 2048,
        "n_ubatch": 512,
        "n_threads": 8,
        "cpu_mask": "0x0",
        "cpu_strict": False,
        "poll": 50,
        "type_k": "f16",
        "type_v": "f16",
        "n_gpu_layers": 0,
        "n_cpu_moe": 0,
        "split_mode": "layer",
        "main_gpu": 0,
        "no_kv_offload": False,
        "flash_attn": -1,
        "devices": "auto",
        "tensor_split": "0.00",
        "tensor_buft_overrides": "none",
        "load_mode": "mmap",
        "embeddings": False,
        "no_op_offload": 0,
        "no_host": False,
        "fit_target": 0,
        "fit_min_ctx": 0,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "n_depth": 0,
        "test_time": "2026-12-06T05:00:00Z",
        "avg_ns": round(1e9 * (n_prompt + n_gen) / avg_ts),
        "stddev_ns": 1000,
        "avg_ts": avg_ts,
        "stddev_ts": 0.12,
    }
    fields |= changes
    samples = [fields["avg_ns"]] * 5
    return fields | {"samples_ns": samples, "samples_ts": [avg_ts] * 5}


DEFAULT_ROWS = (row(512, 0, 88.51), row(0, 128, 21.47))  # llama-bench's default tests: pp512, tg128


def _value(value) -> str:
    return json.dumps(value) if not isinstance(value, float) else f"{value:.6f}"  # std::to_string's six decimals


def as_json(rows=DEFAULT_ROWS) -> str:
    """`-o json`: `[`, each test as `  {` with a field a line, `\\n]`."""
    tests = []
    for r in rows:
        lines = [f'    "{k}": {_value(v)},' for k, v in r.items() if k not in ("samples_ns", "samples_ts")]
        lines.append(f'    "samples_ns": [ {", ".join(map(str, r["samples_ns"]))} ],')
        lines.append(f'    "samples_ts": [ {", ".join(f"{t:g}" for t in r["samples_ts"])} ]')
        tests.append("  {\n" + "\n".join(lines) + "\n  }")
    return "[\n" + ",\n".join(tests) + "\n]\n"


def as_jsonl(rows=DEFAULT_ROWS) -> str:
    """`-o jsonl`: one object a line, `"field": value, ` each."""
    out = []
    for r in rows:
        body = "".join(f'"{k}": {_value(v)}, ' for k, v in r.items() if k not in ("samples_ns", "samples_ts"))
        ns, ts = ", ".join(map(str, r["samples_ns"])), ", ".join(f"{t:g}" for t in r["samples_ts"])
        out.append("{" + body + f'"samples_ns": [ {ns} ],"samples_ts": [ {ts} ]' + "}")
    return "\n".join(out) + "\n"


def _test_name(r: dict) -> str:
    parts = [f"pp{r['n_prompt']}"] * bool(r["n_prompt"]) + [f"tg{r['n_gen']}"] * bool(r["n_gen"])
    name = "+".join(parts)
    return name + (f" @ d{r['n_depth']}" if r["n_depth"] else "")


def as_markdown(rows=DEFAULT_ROWS, ngl: bool = False, backend: str = "CPU") -> str:
    """The default `-o md` of a CPU backend (model, size, params, backend, threads, test, t/s; `ngl` where the
    backend is not a CPU's), then the build line."""
    columns = [("model", -30), ("size", 10), ("params", 10), ("backend", -10)]
    columns += [("ngl", 3)] if ngl else []
    columns += [("threads", 7), ("test", 15), ("t/s", 20)]
    head = "|" + "".join(f" {name:>{w}} |" if w > 0 else f" {name:<{-w}} |" for name, w in columns)
    dashes = "|" + "".join(f" {'-' * (abs(w) - 1)}{':' if w > 0 else '-'} |" for _, w in columns)
    lines = [head, dashes]
    for r in rows:
        values = {
            "model": r["model_type"],
            "size": f"{r['model_size'] / 2**30:.2f} GiB",
            "params": f"{r['model_n_params'] / 1e9:.2f} B",
            "backend": backend,
            "ngl": str(r["n_gpu_layers"]),
            "threads": str(r["n_threads"]),
            "test": _test_name(r),
            "t/s": f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}",
        }
        lines.append("|" + "".join(f" {values[n]:>{w}} |" if w > 0 else f" {values[n]:<{-w}} |" for n, w in columns))
    return "\n".join(lines) + "\n\nbuild: 0104b151 (7150)\n"
