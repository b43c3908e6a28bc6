#!/usr/bin/env python3
"""run13 model: run11's model (gen_model6.py: run3's exact header, the same seed stream, so every other tensor's bytes
are run11's) with token_embd and output rewritten so that greedy decoding has a large logit margin: token t's
embedding is a random +-A sign pattern (Q4_K: scales = mins = 1, q in {0, 15}, dmin = 7.5 d), and output row u is
the sign pattern of pred(u) (Q6_K: scales 1, q = 32 +- 31), pred the inverse of a fixed random permutation succ of
the ordinary tokens (ids >= 259: not unk/bos/eos nor byte tokens; their output rows are zero). The logit of
succ(t) is then ~n_embd * C against ~sqrt(n_embd) * C for the others, so the CPU and the GPU pick the same token.
usage: gen_model13.py HEADER TENSORS_JSON OUT [OUT_SCALE] [SUCC_OUT.npy]"""

import json
import sys
from pathlib import Path

import numpy as np

hdr, tensors_json, out = sys.argv[1:4]
meta = json.loads(Path(tensors_json).read_text())
rng = np.random.default_rng(6)
F16 = np.float16
OUT_SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
N_EMBD, N_VOCAB, FIRST_ORDINARY = 2048, 32000, 259
EMB_D = 0.026 / 7.5  # embedding entries +-0.026: the RMS of run11's random Q4_K embedding (0.0260)
OUT_D = 5e-4  # output entries +-31 * OUT_D: the successor's logit ~ 31 * OUT_D * 2048 = 32


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


def pack_q4k_signs(signs, d):
    """Q4_K blocks whose 256 values are +-7.5 d by `signs` (rows of 256 booleans, True = +)."""
    q = np.where(signs, 15, 0).astype(np.uint8).reshape(-1, 4, 2, 32)  # per 64-chunk: low nibbles, high nibbles
    b = np.zeros((len(signs), 144), np.uint8)
    b[:, 0:2] = np.frombuffer(F16(d).tobytes(), np.uint8)
    b[:, 2:4] = np.frombuffer(F16(7.5 * d).tobytes(), np.uint8)
    b[:, 4:16] = [1, 1, 1, 1, 1, 1, 1, 1, 0x11, 0x11, 0x11, 0x11]  # every sub-block's 6-bit scale and min = 1
    b[:, 16:] = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)
    return b


def pack_q6k(q, d):
    """Q6_K blocks of the 6-bit quants `q` (rows of 256 values 0..63; value = d * (q - 32)), scales 1."""
    q = q.astype(np.uint8).reshape(-1, 2, 4, 32)  # per 128-half: values l, l+32, l+64, l+96
    lo, hi = q & 0xF, q >> 4
    b = np.zeros((len(q), 210), np.uint8)
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)
    b[:, 0:128] = ql.reshape(-1, 128)
    b[:, 128:192] = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(-1, 64)
    b[:, 192:208] = 1
    b[:, 208:210] = np.frombuffer(F16(d).tobytes(), np.uint8)
    return b


def patterns():
    """Embedding signs (vocab x n_embd) and succ (vocab; -1 where no successor is set)."""
    prng = np.random.default_rng(13)
    signs = prng.integers(0, 2, size=(N_VOCAB, N_EMBD)).astype(bool)
    ordinary = np.arange(FIRST_ORDINARY, N_VOCAB)
    succ = np.full(N_VOCAB, -1)
    succ[ordinary] = prng.permutation(ordinary)
    return signs, succ


def embd_bytes(signs):
    return pack_q4k_signs(signs.reshape(-1, 256), EMB_D)


def output_bytes(signs, succ):
    q = np.full((N_VOCAB, N_EMBD), 32, np.uint8)
    has = succ >= 0
    q[succ[has]] = np.where(signs[has], 63, 1)  # row succ(t) = t's pattern: pred(succ(t)) = t
    return pack_q6k(q.reshape(-1, 256), OUT_D)


def main():
    signs, succ = patterns()
    if len(sys.argv) > 5:
        np.save(sys.argv[5], succ)
    special = {"token_embd.weight": lambda: embd_bytes(signs), "output.weight": lambda: output_bytes(signs, succ)}
    with open(out, "wb") as f:
        f.write(Path(hdr).read_bytes()[: meta["data_offset"]])
        for t in sorted(meta["tensors"], key=lambda t: t["abs_offset"]):
            f.write(b"\0" * (t["abs_offset"] - f.tell()))
            data = {"Q4_K": q4k, "Q6_K": q6k}.get(t["type"])
            arr = data(t["name"], t["n_bytes"]) if data else f32(t["name"], t["n_bytes"])  # keeps run11's stream
            if t["name"] in special:
                arr = special[t["name"]]()
            assert arr.nbytes == t["n_bytes"], t["name"]
            f.write(arr.tobytes())
        print("wrote", f.tell(), "bytes")


if __name__ == "__main__":
    main()
