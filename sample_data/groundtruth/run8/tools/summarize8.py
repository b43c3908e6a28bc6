#!/usr/bin/env python3
"""run8 summary.csv: one row per request from llama-server's own timings (logs/<a|c>/server_*.json) and the client's
/proc snapshots (decode bytes = from the first streamed token to the end, over predicted_n - 1 tokens)."""

import csv
import gzip
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
READ_AHEAD_KB = {"ram_6g_off_ra128": 128}  # pipeline8c.sh set it for this server only; the drive's own is 8192
COLS = [
    "machine",
    "server",
    "placement",
    "fa",
    "kv_type",
    "n_ctx_slot",
    "request",
    "prompt_n",
    "prompt_tps",
    "decode_n",
    "decode_tps",
    "mem_limit_bytes",
    "read_ahead_kb",
    "moe_cache_mib",
    "decode_disk_bytes_per_token",
    "decode_proc_read_bytes_per_token",
    "decode_majflt_per_token",
    "prompt_disk_bytes",
    "cmd",
]


def flag(cmd, name, default=""):
    found = re.search(rf"{name} (\S+)", cmd)
    return found[1] if found else default


def delta(a, b, key):
    return (b or {}).get(key, 0) - (a or {}).get(key, 0)


def rows():
    for js in sorted(HERE.glob("logs/*/server_*.json")):
        name = js.stem.removeprefix("server_")
        cmd = js.with_suffix(".cmd").read_text().strip()
        limit = re.search(r"cgroup: \S+ (\d+)", cmd)
        log = gzip.decompress(js.with_suffix(".log.gz").read_bytes()).decode()
        n_ctx_slot = re.search(r"n_ctx_slot = (\d+)", log)[1]  # the log's, after any capping
        for r in json.loads(js.read_text())["requests"]:
            t, a, b, s = r["timings"], r["snap_first_token"], r["snap_end"], r["snap_send"]
            nd = max(t["predicted_n"] - 1, 1)
            yield dict(
                machine=js.parent.name,
                server=name,
                placement="cpu-moe" if "--cpu-moe" in cmd else "gpu",
                fa=flag(cmd, "-fa"),
                kv_type=flag(cmd, "-ctk", "f16"),
                n_ctx_slot=n_ctx_slot,
                request=r["name"],
                prompt_n=t["prompt_n"],
                prompt_tps=round(t["prompt_per_second"], 2),
                decode_n=t["predicted_n"],
                decode_tps=round(t["predicted_per_second"], 3),
                mem_limit_bytes=limit[1] if limit else "",
                read_ahead_kb=READ_AHEAD_KB.get(name, 8192),
                moe_cache_mib=flag(cmd, "--moe-cache-mib", "0"),
                decode_disk_bytes_per_token=round(delta(a, b, "disk_read_bytes") / nd),
                decode_proc_read_bytes_per_token=round(delta(a, b, "read_bytes") / nd),
                decode_majflt_per_token=round(delta(a, b, "majflt") / nd, 1),
                prompt_disk_bytes=delta(s, a, "disk_read_bytes"),
                cmd=cmd.split("  (")[0],
            )


with open(HERE / "summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, COLS)
    w.writeheader()
    w.writerows(rows())
