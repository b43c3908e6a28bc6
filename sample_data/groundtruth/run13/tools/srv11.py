#!/usr/bin/env python3
"""run11 client (run10's srv10.py with one change: each request's prompt is exactly one paragraph of the prompts file,
with no "[tag] " prefix, so that the CPU recording sees the same text): wait for llama-server, then send every
paragraph of PROMPTS in order (paragraphs are separated by blank lines; each is stripped), N_PREDICT tokens each,
and keeps the generated token ids (return_tokens). For every request it snapshots the server's
/proc/<pid>/io (read_bytes), its major page faults (/proc/<pid>/stat), the block device's sectors read
(/proc/diskstats) and, with CG set, the cgroup's memory.current / memory.stat file+anon: at send, at the first
streamed token (prompt done) and at the end. Saves llama-server's own timings per request to OUT as JSON."""

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

port, spid, out, prompts_file, n_predict_all = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
paragraphs = [p.strip() for p in Path(prompts_file).read_text().split("\n\n") if p.strip()]
specs = [(f"p{i}", p, n_predict_all) for i, p in enumerate(paragraphs)]
CG = os.environ.get("CG", "")
DISK = os.environ.get("DISK", "vda")


def snap():
    s = dict(t=time.time())
    try:
        for line in Path(f"/proc/{spid}/io").read_text().splitlines():
            k, v = line.split(":")
            s[k.strip()] = int(v)
        st = Path(f"/proc/{spid}/stat").read_text().rsplit(")", 1)[1].split()
        s["minflt"], s["majflt"] = int(st[7]), int(st[9])
        status = Path(f"/proc/{spid}/status").read_text().splitlines()
        s["rss_kb"] = int([ln for ln in status if ln.startswith("VmRSS")][0].split()[1])
    except (OSError, IndexError):
        pass
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == DISK:
            s["disk_read_bytes"] = int(f[5]) * 512
            s["disk_reads"] = int(f[3])
    if CG:
        try:
            s["cg_current"] = int(Path(f"{CG}/memory.current").read_text())
            for line in Path(f"{CG}/memory.stat").read_text().splitlines():
                k, v = line.split()
                if k in ("file", "anon", "file_mapped", "workingset_refault_file", "pgmajfault"):
                    s["cg_" + k] = int(v)
        except OSError:
            pass
    return s


t_start = time.time()
while True:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            if r.status == 200:
                break
    except Exception:
        pass
    try:
        state = Path(f"/proc/{spid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    if state in ("Z", "X", "gone"):
        print("server exited before becoming healthy")
        sys.exit(2)
    if time.time() - t_start > 240:
        print("server not healthy after 240 s")
        sys.exit(3)
    time.sleep(0.3)
load_s = time.time() - t_start
print(f"server healthy after {load_s:.2f} s", flush=True)
results = dict(load_s=load_s, after_load=snap(), requests=[])


def post(name, prompt, n_predict):
    body = dict(
        prompt=prompt,
        n_predict=n_predict,
        temperature=0.0,
        top_k=1,
        seed=42,
        ignore_eos=True,
        cache_prompt=False,
        stream=True,
        return_tokens=True,
    )
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    s0, s1, last, tokens = snap(), None, None, []
    with urllib.request.urlopen(req, timeout=500) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            j = json.loads(line[6:])
            if s1 is None:
                s1 = snap()
            last = j
            tokens += j.get("tokens") or []
            if j.get("stop"):
                break
    s2 = snap()
    return dict(
        snap_send=s0,
        snap_first_token=s1,
        snap_end=s2,
        timings=(last or {}).get("timings"),
        tokens_predicted=(last or {}).get("tokens_predicted"),
        tokens_evaluated=(last or {}).get("tokens_evaluated"),
        tokens=tokens,
    )


for name, prompt, n_predict in specs:
    res = post(name, prompt, int(n_predict))
    res.update(name=name, n_predict=int(n_predict), wall_s=res["snap_end"]["t"] - res["snap_send"]["t"])
    results["requests"].append(res)
    t = res["timings"] or {}
    a, b = res["snap_first_token"] or {}, res["snap_end"]
    nd = max((t.get("predicted_n") or 1) - 1, 1)
    dr = (b.get("disk_read_bytes", 0) - a.get("disk_read_bytes", 0)) / nd
    pr = (b.get("read_bytes", 0) - a.get("read_bytes", 0)) / nd
    print(
        f"{name}: prompt {t.get('prompt_n')} tok {t.get('prompt_per_second', 0):.1f} t/s | "
        f"decode {t.get('predicted_n')} tok {t.get('predicted_per_second', 0):.2f} t/s | wall {res['wall_s']:.1f} s"
        f" | decode disk {dr / 1e6:.1f} MB/tok, proc {pr / 1e6:.1f} MB/tok",
        flush=True,
    )
    Path(out).write_text(json.dumps(results, indent=1))
