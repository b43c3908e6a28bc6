#!/usr/bin/env python3
"""run11 summary, from the pipeline's results folder (res/): summary.csv (one row per server request and per
llama-bench test), quant.csv (the CPU expert path per ggml type and thread count) and the package table
moe_model/data/cpu_quant_rates.json (schema in docs/data.md).

The expert rate per type: `expert_gbs` = expert bytes per token x decode t/s (the whole token's time: a lower bound on
the expert path's own rate). `expert_only_gbs` takes off the part of a token that does not depend on the experts'
type, from the anchor pair Q4_K (8 experts used) and Q4_K_u1 (the same file with 1 used): with t8 and t1 their ms per
token, one expert slot costs e = (t8 - t1) / 7 and the fixed part is f = t1 - e (attention, router, norms, output
head, graph overhead: the same dense tensors in every file); expert_only_gbs = expert bytes / (t - f).

usage: summarize11.py RES_DIR OUT_DIR RATES_JSON"""

import csv
import json
import sys
from pathlib import Path

res, out, rates_path = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
THREADS = (2, 4, 8, 16)


def bench_rows() -> list[dict]:
    rows = []
    for f in sorted(res.glob("bench_*_t*.json")):
        qtype, threads = f.stem.removeprefix("bench_").rsplit("_t", 1)
        text = f.read_text().strip()
        for test in json.loads(text) if text else []:
            kind = "prompt" if test["n_prompt"] and not test["n_gen"] else "decode"
            rows.append(dict(type=qtype, threads=int(threads), kind=kind, test=test))
    return rows


def models() -> dict[str, dict]:
    out = {}
    for line in (res / "quant_models.jsonl").read_text().splitlines():
        m = json.loads(line)
        out[m["type"] + ("_u1" if m["n_used"] == 1 else "")] = m
    return out


def quant_table(rows: list[dict], info: dict[str, dict]) -> list[dict]:
    by = {(r["type"], r["threads"], r["kind"]): r["test"] for r in rows}
    table = []
    for (qtype, threads, kind), test in sorted(by.items()):
        if kind != "decode":
            continue
        m, prompt = info[qtype], by.get((qtype, threads, "prompt"))
        table.append(
            dict(
                type=qtype,
                threads=threads,
                n_used=m["n_used"],
                bits_per_weight=m["bits_per_weight"],
                expert_bytes_per_token=m["expert_bytes_per_token"],
                dense_bytes_per_token=m["dense_bytes_per_token"],
                decode_tps=test["avg_ts"],
                decode_tps_stddev=test["stddev_ts"],
                prompt_tps=prompt["avg_ts"] if prompt else None,
                prompt_tps_stddev=prompt["stddev_ts"] if prompt else None,
                expert_gbs=m["expert_bytes_per_token"] * test["avg_ts"] / 1e9,
            )
        )
    return table


def fixed_ms(table: list[dict]) -> dict[int, float]:
    """Per thread count, the part of a token's time that does not depend on the experts (the Q4_K anchor pair)."""
    ms = {(r["type"], r["threads"]): 1000 / r["decode_tps"] for r in table}
    out = {}
    for n in THREADS:
        if ("Q4_K", n) in ms and ("Q4_K_u1", n) in ms:
            slot = (ms["Q4_K", n] - ms["Q4_K_u1", n]) / 7
            out[n] = ms["Q4_K_u1", n] - slot
    return out


def membw() -> dict[str, float]:
    """The host's memory read rate per thread count (tools/membw11.c: best of 5 sums over 4 GiB)."""
    out = {}
    for line in (res / "membw.txt").read_text().splitlines():
        words = line.split()
        out[words[1]] = float(words[3])
    return out


def server_rows() -> list[dict]:
    rows = []
    for f in sorted(res.glob("server_*.json")):
        name = f.stem.removeprefix("server_")
        cmd = (res / f"server_{name}.cmd").read_text().strip()
        for req in json.loads(f.read_text())["requests"]:
            t = req["timings"] or {}
            rows.append(
                dict(
                    kind="server",
                    name=name,
                    request=req["name"],
                    prompt_n=t.get("prompt_n"),
                    prompt_tps=t.get("prompt_per_second"),
                    decode_n=t.get("predicted_n"),
                    decode_tps=t.get("predicted_per_second"),
                    command=cmd,
                )
            )
    return rows


def main() -> None:
    rows, info = bench_rows(), models()
    table = quant_table(rows, info)
    fixed = fixed_ms(table)
    for r in table:
        f = fixed.get(r["threads"])
        t_ms = 1000 / r["decode_tps"]
        r["expert_only_gbs"] = r["expert_bytes_per_token"] / (t_ms - f) / 1e6 if f is not None and t_ms > f else None
    keys = list(table[0])
    with open(out / "quant.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, keys)
        w.writeheader()
        w.writerows(table)
    bench = [
        dict(
            kind="bench",
            name=f"{r['type']}_t{r['threads']}",
            request=r["kind"],
            prompt_n=r["test"]["n_prompt"],
            prompt_tps=r["test"]["avg_ts"] if r["kind"] == "prompt" else None,
            decode_n=r["test"]["n_gen"],
            decode_tps=r["test"]["avg_ts"] if r["kind"] == "decode" else None,
            command=f"llama-bench -m q_{r['type']}.gguf -ngl 0 -t {r['threads']} -p 128 -n 32 -r 2 -ot exps=CPU "
            "--repack 0 -o json (CUDA_VISIBLE_DEVICES= taskset -c <first N cores>)",
        )
        for r in rows
    ]
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, list(bench[0]))
        w.writeheader()
        w.writerows(server_rows() + bench)
    test0 = rows[0]["test"]
    rates = dict(
        source=dict(
            run="run11",
            data="sample_data/groundtruth/run11",
            host=f"{test0['cpu_info']} (family 6 model 207, Emerald Rapids), 16 cores x 1 thread, 125 GiB, KVM guest "
            "(the lent GPU machine's host; this run's card was an H100)",
            build="llama.cpp b11549 (thirdparty/llama.cpp of the PyPI sdist xllamacpp 2026.10.11549; the binaries "
            f"report build {test0['build_number']}, commit {test0['build_commit']})",
            method="llama-bench -ngl 0 -p 128 -n 32 -r 2 -ot exps=CPU --repack 0, GPU hidden, pinned to N cores; "
            "random-weight qwen3moe, 8 layers, Qwen3-30B-A3B's expert size, experts of one type per file",
        ),
        model=dict(
            arch="qwen3moe",
            n_layer=8,
            n_embd=2048,
            n_ff_exp=768,
            n_expert=128,
            n_expert_used=8,
            dense_bytes_per_token=table[0]["dense_bytes_per_token"],
        ),  # fmt: skip
        fixed_ms={str(n): round(v, 4) for n, v in fixed.items()},
        host_read_gbs=membw(),
        rows=[
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "dense_bytes_per_token"}
            for r in table
            if r["n_used"] == 8
        ],
    )
    rates_path.write_text(json.dumps(rates, indent=1) + "\n")
    print(f"{len(table)} decode rows, fixed ms {fixed}")
    for r in table:
        print(
            f"{r['type']:8s} t{r['threads']:<2d} decode {r['decode_tps']:7.1f} prompt {r['prompt_tps'] or 0:7.1f} "
            f"bytes/tok {r['expert_bytes_per_token'] / 1e6:6.1f} MB  {r['expert_gbs']:6.1f} GB/s  "
            f"expert-only {r['expert_only_gbs'] or 0:6.1f} GB/s"
        )


if __name__ == "__main__":
    main()
