#!/usr/bin/env python3
"""run9: plain `predict` (no machine file, the h200 preset) for each server and prompt length of summary.csv, against
llama-server's measured prompt and decode t/s (mean of the servers' two runs; the warm-up request left out)."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from moe_model.speed.vram import CUDA_RESERVE_MIB

HERE = Path(__file__).resolve().parent.parent
HEADER = HERE.parent / "run3" / "model-header.gguf"
SERVERS = {  # measured server(s) -> predict flags
    ("fit", "fit_rep"): ["--placement", "fit", "--vram-gib", str((6400 + CUDA_RESERVE_MIB) / 1024)],
    ("cpu_moe", "cpu_moe_rep"): ["--placement", "cpu-moe"],
    ("cpu_moe_c4185",): ["--placement", "cpu-moe", "--budget-mib", "4185"],
}


def predict(flags, prompt_n):
    cmd = [sys.executable, "-m", "moe_model", "predict", "--model", str(HEADER), "--hardware", "h200", "--json"]
    cmd += ["--ctx", "8192", "-ub", "512", "-fa", "off", "--n-predict", "32", "--build", "11549"]
    cmd += ["--prompt-tokens", str(prompt_n), *flags]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


df = pd.read_csv(HERE / "summary.csv")
df = df[df.request != "warm"]
print(
    "| server | prompt tokens | prompt t/s measured (runs) | predicted | error "
    "| decode t/s measured (runs) | predicted | error |"
)
print("|---|---|---|---|---|---|---|---|")
for servers, flags in SERVERS.items():
    rows = df[df.server.isin(servers)]
    for _req, g in rows.groupby("request", sort=False):
        n = int(g.prompt_n.iloc[0])
        p = predict(flags, n)
        mp, md = g.prompt_tps.mean(), g.decode_tps.mean()
        ep, ed = p["prefill_tps"] / mp - 1, p["decode_tps"] / md - 1
        runs_p = ", ".join(f"{v:.0f}" for v in g.prompt_tps)
        runs_d = ", ".join(f"{v:.1f}" for v in g.decode_tps)
        print(
            f"| {servers[0]} | {n} | {mp:.0f} ({runs_p}) | {p['prefill_tps']:.0f} | {100 * ep:+.0f} % "
            f"| {md:.1f} ({runs_d}) | {p['decode_tps']:.1f} | {100 * ed:+.0f} % |  host layers {p['host_layers']}"
        )
