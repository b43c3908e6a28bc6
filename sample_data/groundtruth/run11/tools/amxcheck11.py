#!/usr/bin/env python3
"""run11: does llama-cpp-python's CPU library survive a 40-token llama_decode of a quantized model with llama.cpp's
extra buffer types (AMX / repack) on? On the helper's VM it died with SIGILL (`tilezero` in ggml's AMX matmul).
usage: amxcheck11.py MODEL.gguf USE_EXTRA_BUFTS(0|1)      exit 0 and prints "decode 0" when it works"""

import sys

import llama_cpp.llama_cpp as low

low.llama_backend_init()
mp = low.llama_model_default_params()
mp.n_gpu_layers, mp.use_extra_bufts = 0, sys.argv[2] == "1"
model = low.llama_model_load_from_file(sys.argv[1].encode(), mp)
cp = low.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 128, 64, 64, 4, 4
ctx = low.llama_init_from_model(model, cp)
batch, n = low.llama_batch_init(64, 0, 1), 40
for i in range(n):
    batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = 5 + i, i, 1, int(i == n - 1)
    batch.seq_id[i][0] = 0
batch.n_tokens = n
print("decode", low.llama_decode(ctx, batch), flush=True)
