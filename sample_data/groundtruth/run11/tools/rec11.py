#!/usr/bin/env python3
"""run11b: the project's recorder (moe_model.record, called as the `record` command calls it) with one addition that
llama-server b11549 makes at start-up and the recorder did not: after the BOS/EOS warm-up, the 2-token probe decode
of token 0 twice (tools/server/server-context.cpp `common_context_can_seq_rm(ctx_tgt)`, common/common.cpp: decode
[0, 0], then the memory cleared). Writes the trace and each prompt's generated tokens (JSON); the CPU is not timed.
usage: rec11.py MODEL.gguf PROMPTS THREADS OUT.npz TOKENS.json [noprobe]"""

import json
import sys
import time

from moe_model.record import session
from moe_model.record.prompts import read_prompts
from moe_model.record.trace_out import PHASE_WARMUP, write_trace

model, prompts, threads, out, tokens_out = sys.argv[1:6]
probe = "noprobe" not in sys.argv[6:]
server_warm_up = session._Run.warm_up


def warm_up_and_probe(run) -> None:
    server_warm_up(run)
    run.call([0, 0], 0, PHASE_WARMUP, True)
    run.llm.clear()


if probe:
    session._Run.warm_up = warm_up_and_probe
session.time_cpu = lambda *_args: session.Timings()  # routing only: the host record is not written here
t0 = time.time()
settings = session.RecordSettings(n_predict=64, n_ctx=8192, n_batch=2048, n_ubatch=512, threads=int(threads))
rec = session.record(model, read_prompts(prompts), settings, progress=None)
write_trace(out, rec.ubatches)
with open(tokens_out, "w") as f:
    json.dump({"threads": int(threads), "probe": probe, "generated": [list(g) for g in rec.generated]}, f)
print(f"{out}: {len(rec.ubatches)} ubatches, probe {probe}, {threads} threads, {time.time() - t0:.1f} s", flush=True)
