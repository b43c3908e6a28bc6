#!/usr/bin/env python3
"""run11: the CPU recordings replayed through the project's simulator (moe_model.llama.simulate) at the servers'
budgets, beside the servers' `-lv 4` teardown lines (moe_model.readers.logs), and where each recording's greedy
tokens first leave each server's. Writes hit_rates.csv; run from the repository root:
PYTHONPATH=. python sample_data/groundtruth/run11/tools/compare11.py"""

import csv
import gzip
import json

from moe_model.llama.simulate import simulate
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_recorded
from moe_model.resources import data_path

RUN = data_path("groundtruth", "run11")
SERVERS = {"c2092": 2092, "c4185": 4185, "c6278": 6278}
RECORDINGS = {  # name: (trace, generated tokens or None, threads, server probe decode added)
    "record_t16": ("cpu.npz", "run11b/tokens_n16.json", 16, False),
    "probe_t16": ("run11b/cpu_probe_t16.npz", "run11b/tokens_p16.json", 16, True),
    "probe_t12": ("run11b/cpu_probe_t12.npz", "run11b/tokens_p12.json", 12, True),
    "probe_t8": ("run11b/cpu_probe_t8.npz", "run11b/tokens_p8.json", 8, True),
}


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def server_tokens(name: str) -> list[list[int]]:
    return [r["tokens"] for r in json.loads((RUN / "logs" / f"server_{name}.json").read_text())["requests"]]


model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
logged = {s: parse_log(gzip.decompress((RUN / "logs" / f"server_{s}.log.gz").read_bytes()))[0] for s in SERVERS}
rows = []
for name, (trace, tokens, threads, probe) in RECORDINGS.items():
    work = load_recorded(RUN / trace)
    generated = json.loads((RUN / tokens).read_text())["generated"]
    diverge = {
        s: [first_difference(g, t) for g, t in zip(generated, server_tokens(s), strict=True)] for s in ("off", "c2092")
    }
    for server, budget in SERVERS.items():
        small, st = simulate(model, work, budget).small, logged[server].decode_stats
        rows.append(
            dict(
                recording=name, trace=trace, threads=threads, probe=probe, server=server, budget_mib=budget,
                sim_hits=small.hits, sim_lookups=small.lookups, sim_hit_rate=round(small.hits / small.lookups, 5),
                server_hits=st.hits, server_lookups=st.hits + st.misses, server_hit_rate=round(st.hit_rate, 5),
                points=round(100 * (small.hits / small.lookups - st.hit_rate), 2),
                first_token_diff_vs_off=" ".join(map(str, diverge["off"])),
                first_token_diff_vs_cache_servers=" ".join(map(str, diverge["c2092"])),
            )
        )  # fmt: skip
with open(RUN / "hit_rates.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, list(rows[0]))
    w.writeheader()
    w.writerows(rows)
for r in rows:
    print(f"{r['recording']:11s} {r['server']:6s} sim {100 * r['sim_hit_rate']:6.2f} % ({r['sim_lookups']:,} lookups) "
          f"server {100 * r['server_hit_rate']:6.2f} % ({r['server_lookups']:,}) {r['points']:+.2f}")  # fmt: skip
