#!/usr/bin/env python3
"""run10: summary.csv from logs/*/server_*.json (+ .cmd, the client log's affinity line and the -lv 4 log's
n_threads): one row per request, llama-server's own timings."""

import gzip
import json
import re
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent.parent
rows = []
for js in sorted(HERE.glob("logs/*/server_*.json")):
    name = js.stem.removeprefix("server_")
    cmd = js.with_suffix(".cmd").read_text().strip()
    log = gzip.decompress(js.with_suffix(".log.gz").read_bytes()).decode(errors="replace")
    client = js.with_suffix(".client.log").read_text()
    n_threads = re.search(r"system_info: n_threads = (\d+)", log)
    affinity = re.search(r"current affinity list: (\S+)", client)
    n_ctx = re.search(r"n_ctx_slot = (\d+)", log)
    data = json.loads(js.read_text())
    for r in data["requests"]:
        t = r["timings"] or {}
        rows.append(
            dict(
                machine=js.parent.name,
                server=name,
                t_flag=int(m.group(1)) if (m := re.search(r" -t (\d+)", cmd)) else None,
                n_threads=int(n_threads.group(1)),
                affinity=affinity.group(1) if affinity else "",
                pinned="taskset" in cmd,
                request=r["name"],
                prompt_n=t.get("prompt_n"),
                prompt_tps=t.get("prompt_per_second"),
                decode_n=t.get("predicted_n"),
                decode_tps=t.get("predicted_per_second"),
                n_ctx_slot=int(n_ctx.group(1)) if n_ctx else None,
                n_ubatch=512,
                command=cmd,
            )
        )
df = pd.DataFrame(rows)
df.to_csv(HERE / "summary.csv", index=False, float_format="%.2f")
print(df.drop(columns="command").to_string())
