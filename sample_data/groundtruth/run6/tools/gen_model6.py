#!/usr/bin/env python3
"""run6 model: run3's exact GGUF header (first data_offset bytes) + random tensor data of run3's types and sizes.
Q4_K/Q6_K blocks get random quants with small fixed scales (zero-mean weights); norms 1.0; the router N(0, 0.02)."""

import json
import sys
from pathlib import Path

import numpy as np

hdr, tensors_json, out = sys.argv[1:4]
meta = json.loads(Path(tensors_json).read_text())
rng = np.random.default_rng(6)
F16 = np.float16


OUT_SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0  # <1: layer outputs small, routing follows tokens


def scale(name):
    return OUT_SCALE if ("attn_output" in name or "ffn_down" in name) else 1.0


def q4k(name, n_bytes):
    b = rng.integers(0, 256, size=n_bytes, dtype=np.uint8).reshape(-1, 144)
    b[:, 0:2] = np.frombuffer(F16(1e-4 * scale(name)).tobytes(), np.uint8)
    b[:, 2:4] = np.frombuffer(F16(7.5e-4 * scale(name)).tobytes(), np.uint8)
    return b


def q6k(name, n_bytes):
    b = rng.integers(0, 256, size=n_bytes, dtype=np.uint8).reshape(-1, 210)
    b[:, 208:210] = np.frombuffer(F16(1e-5 * scale(name)).tobytes(), np.uint8)
    return b


def f32(name, n_bytes):
    n = n_bytes // 4
    if "gate_inp" in name:
        return rng.normal(0, 0.02, n).astype(np.float32)
    return np.ones(n, np.float32)


with open(out, "wb") as f:
    f.write(Path(hdr).read_bytes()[: meta["data_offset"]])
    for t in sorted(meta["tensors"], key=lambda t: t["abs_offset"]):
        f.write(b"\0" * (t["abs_offset"] - f.tell()))
        data = {"Q4_K": q4k, "Q6_K": q6k}.get(t["type"])
        arr = data(t["name"], t["n_bytes"]) if data else f32(t["name"], t["n_bytes"])
        assert arr.nbytes == t["n_bytes"], t["name"]
        f.write(arr.tobytes())
    print("wrote", f.tell(), "bytes")
