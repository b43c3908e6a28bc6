#!/usr/bin/env python3
"""Host-to-device copy rates (GB/s) with torch: pageable and pinned, 256 MiB, best of 5."""

import json
import sys
import time
from pathlib import Path

import torch

N_BYTES = 256 << 20


def best_gbs(host: torch.Tensor, dev: torch.Tensor, pinned: bool) -> float:
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=pinned)
        torch.cuda.synchronize()
        best = max(best, N_BYTES / (time.perf_counter() - t0) / 1e9)
    return round(best, 2)


dev = torch.empty(N_BYTES, dtype=torch.uint8, device="cuda")
host = torch.ones(N_BYTES, dtype=torch.uint8)
out = {"pageable_gbs": best_gbs(host, dev, False), "pinned_gbs": best_gbs(host.pin_memory(), dev, True)}
print(out)
Path(sys.argv[1]).write_text(json.dumps(out))
