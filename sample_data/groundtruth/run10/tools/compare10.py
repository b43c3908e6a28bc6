#!/usr/bin/env python3
"""run10: plain `predict` (no machine file, the h200 preset, --threads N; none for the default server) for each
-t of summary.csv, against llama-server's measured decode t/s (mean of the two 151-token requests, 64 tokens each)
and prompt t/s (151 tokens: mean of the same two; 1,982 tokens: the one request); the warm-up left out. Also each
-t's decode as a ratio to -t 16's, predicted and measured."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent.parent
HEADER = HERE.parent / "run3" / "model-header.gguf"


def predict(threads, prompt_n, n_predict):
    cmd = [sys.executable, "-m", "moe_model", "predict", "--model", str(HEADER), "--hardware", "h200", "--json"]
    cmd += ["--placement", "cpu-moe", "--ctx", "8192", "-ub", "512", "-fa", "off", "--build", "11549"]
    cmd += ["--n-predict", str(n_predict), "--prompt-tokens", str(prompt_n)]
    cmd += ["--threads", str(threads)] if threads else []
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


df = pd.read_csv(HERE / "summary.csv")
rows = []
for server in ["t2", "t4", "t8", "t16", "tdef"]:
    g = df[(df.server == server) & (df.request != "warm")]
    short, long_ = g[g.request.isin(["p150a", "p150b"])], g[g.request == "p2000"].iloc[0]
    t = None if pd.isna(g.t_flag.iloc[0]) else int(g.t_flag.iloc[0])
    ps, pl = predict(t, int(short.prompt_n.iloc[0]), 64), predict(t, int(long_.prompt_n), 32)
    rows.append(
        dict(
            server=server,
            t=t,
            n_threads=int(g.n_threads.iloc[0]),
            dec_runs=", ".join(f"{v:.1f}" for v in short.decode_tps),
            dec=short.decode_tps.mean(),
            dec_pred=ps["decode_tps"],
            dec2k=long_.decode_tps,
            dec2k_pred=pl["decode_tps"],
            p150_runs=", ".join(f"{v:.0f}" for v in short.prompt_tps),
            p150=short.prompt_tps.mean(),
            p150_pred=ps["prefill_tps"],
            p2k=long_.prompt_tps,
            p2k_pred=pl["prefill_tps"],
        )
    )
r = pd.DataFrame(rows).set_index("server")
ref = r.loc["t16"]
print(
    "| -t (n_threads) | decode measured (runs) | predicted | error | ratio to -t 16 meas. / pred. "
    "| decode at 1,982 meas. / pred. / error | prompt 151 meas. (runs) / pred. / error "
    "| prompt 1,982 meas. / pred. / error |"
)
print("|---|---|---|---|---|---|---|---|")
for _, x in r.iterrows():
    label = f"{int(x.t)}" if pd.notna(x.t) else f"none (default: {x.n_threads})"
    print(
        f"| {label} | {x.dec:.1f} ({x.dec_runs}) | {x.dec_pred:.1f} | {100 * (x.dec_pred / x.dec - 1):+.0f} % "
        f"| {x.dec / ref.dec:.2f} / {x.dec_pred / ref.dec_pred:.2f} "
        f"| {x.dec2k:.1f} / {x.dec2k_pred:.1f} / {100 * (x.dec2k_pred / x.dec2k - 1):+.0f} % "
        f"| {x.p150:.0f} ({x.p150_runs}) / {x.p150_pred:.0f} / {100 * (x.p150_pred / x.p150 - 1):+.0f} % "
        f"| {x.p2k:.0f} / {x.p2k_pred:.0f} / {100 * (x.p2k_pred / x.p2k - 1):+.0f} % |"
    )
