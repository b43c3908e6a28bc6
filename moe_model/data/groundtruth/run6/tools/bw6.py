#!/usr/bin/env python3
"""Host-to-device copy rates (GB/s) with torch: pageable and pinned, 256 MiB, best of 5."""
import json, sys, time
import torch

n = 256 << 20
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
out = {}
for name, pin in (("pageable", False), ("pinned", True)):
    host = torch.ones(n, dtype=torch.uint8).pin_memory() if pin else torch.ones(n, dtype=torch.uint8)
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        dev.copy_(host, non_blocking=pin); torch.cuda.synchronize()
        best = max(best, n / (time.perf_counter() - t0) / 1e9)
    out[name + "_gbs"] = round(best, 2)
print(out); json.dump(out, open(sys.argv[1], "w"))
