#!/usr/bin/env python3
"""run11: dequantize gen_quant11's random blocks of every type with gguf's numpy dequantizers; all values must be
finite. Prints the largest |weight| and the RMS per type."""

import numpy as np
from gen_quant11 import SCALE_FIELDS, random_blocks
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

rng = np.random.default_rng(0)
for qtype in SCALE_FIELDS:
    blocks = random_blocks(qtype, 4096, rng)
    w = dequantize(blocks, qtype)
    assert w.size == 4096 * GGML_QUANT_SIZES[qtype][0], qtype.name
    assert np.isfinite(w).all(), f"{qtype.name}: non-finite weights"
    print(f"{qtype.name:8s} max|w| {np.abs(w).max():.3g}  rms {np.sqrt((w.astype(np.float64) ** 2).mean()):.3g}")
