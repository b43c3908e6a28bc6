#!/usr/bin/env python3
"""run9: summary.csv from logs/*/server_*.json (+ .cmd, and the -lv 4 log for the slot context and --fit's layout):
one row per request, llama-server's own timings."""

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
    fit = re.findall(r"set ngl_per_device\[0\]\.\(n_layer, n_part(?:, overflow_type)?\)=\(([^)]*)\)", log)
    free = re.search(r"using device CUDA0 .* - (\d+) MiB free", log)
    fitt = re.search(r"-fitt (\d+)", cmd)
    model_gpu = re.search(r"CUDA0 model buffer size =\s+([\d.]+) MiB", log)
    n_ctx = re.search(r"n_ctx_slot = (\d+)", log)
    data = json.loads(js.read_text())
    for r in data["requests"]:
        t = r["timings"] or {}
        rows.append(
            dict(
                machine=js.parent.name,
                server=name,
                request=r["name"],
                prompt_n=t.get("prompt_n"),
                prompt_tps=t.get("prompt_per_second"),
                decode_n=t.get("predicted_n"),
                decode_tps=t.get("predicted_per_second"),
                n_ctx_slot=int(n_ctx.group(1)) if n_ctx else None,
                n_ubatch=512,
                emulated_free_mib=(int(free.group(1)) - int(fitt.group(1)) + 1024) if fitt and free else None,
                fit_layout=fit[-1].replace(" ", "") if fit and fitt else "",
                cuda_model_buffer_mib=float(model_gpu.group(1)) if model_gpu else None,
                command=cmd,
            )
        )
df = pd.DataFrame(rows)
df.to_csv(HERE / "summary.csv", index=False, float_format="%.2f")
print(df.drop(columns="command").to_string())
