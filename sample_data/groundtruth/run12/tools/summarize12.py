"""run12 summary (of this folder, or of the folder given: run12b): summary.csv, one row per server request
(llama-server's own timings, as run11's summarize11.py), from the pipeline's server_*.json and .cmd."""

import csv
import json
import sys
from pathlib import Path

here = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
rows = []
for f in sorted(here.glob("server_*.json")):
    name = f.stem.removeprefix("server_")
    cmd = (here / f"server_{name}.cmd").read_text().strip()
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
with open(here / "summary.csv", "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
