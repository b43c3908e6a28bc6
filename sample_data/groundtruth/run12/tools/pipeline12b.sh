#!/bin/bash
# run12b (issue 36): run12 repeated on another machine of the kind, with a server whose cache holds every expert (8,376 MiB: no steady misses, so its decode is the per-token cost outside the uploads); otherwise as run12: on ONE lent machine, the host record `record` writes (with one core's copy rate of the mmap'd
# model, record/copy_rate.py) beside llama-server b11549 --cpu-moe with the cache, and CUDA's pageable upload of the
# same model's expert-sized slices (upload12.cu), so that the upload rate the servers run at can be set against what
# the CPU-only record measures. run11's model (run3's header + random weights, gen_model6.py) and prompts.
# usage (repo root, on the device): bash build/gt12/pipeline12b.sh   (build/gt12: this folder's tools, run11's inputs, the recorder's moe_model/ in rec/; writes to $OUT)
set -u
S=$PWD/build/gt12; T=$S; W=/root/w12b; R=$W/res; mkdir -p $W/site $R
cd $W  # python -m and -c put the working folder first on sys.path: import the recorder of $S/rec, not a checkout's
exec > >(tee $OUT/pipeline.log) 2>&1
T0=$(date +%s); st() { echo "=== $1 +$(( $(date +%s) - T0 )) s"; }
keep() { tar rf $OUT/res.tar -C $R "$@"; }  # partial results come back even if a later stage is cut off
export PYTHONUNBUFFERED=1
st info; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g | head -2; uname -r
lscpu > $R/lscpu.txt; grep -E 'Model name|^CPU\(s\)|Model:|L3' $R/lscpu.txt; python3 --version
tar xJf $S/site.tar.xz -C $W/site; mkdir -p $W/src && tar xJf $S/llama.cpp.tar.xz -C $W/src
st build  # llama-server only; FlashAttention kernels not compiled (every server runs -fa off)
cmake -S $W/src/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
st genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-run3.gguf 0.01 > $R/gen_model.log 2>&1; echo "gen rc $?"
nvcc -O2 -o $W/upload12 $T/upload12.cu && gcc -O3 -march=native -fopenmp $S/membw11.c -o $W/membw11
st wait_build; wait $BPID; echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log; gzip -f $R/build.log
st membw; for n in 1 16; do OMP_NUM_THREADS=$n OMP_PROC_BIND=close OMP_PLACES=cores $W/membw11; done | tee $R/membw.txt
st record
PYTHONPATH=$W/site:$S/rec timeout 150 python3 -m moe_model record --model $W/model-run3.gguf --prompts $S/prompts11.txt \
  -n 64 -c 8192 -b 2048 -ub 512 --threads 16 -o $OUT/cpu.npz --host-out $OUT/host.json > $R/record.log 2>&1
echo "record rc $?"; tail -3 $R/record.log; cat $OUT/host.json
st copy_rate
PYTHONPATH=$W/site:$S/rec python3 -c "
import moe_model; print(moe_model.__file__, flush=True)
from moe_model.record.copy_rate import copy_gbs
for _ in range(3): print('copy_rate GBps %.2f' % copy_gbs('$W/model-run3.gguf', 953600))" | tee $R/copy_rate.txt
st upload12; $W/upload12 $W/model-run3.gguf 953600 2048 | tee $R/upload12.txt
keep lscpu.txt cmake.log build.log.gz gen_model.log membw.txt record.log copy_rate.txt upload12.txt
COMMON="-ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090"
serve() { # name [extra args]; skipped once the call nears its limit
  local name=$1; shift
  if [ $(( $(date +%s) - T0 )) -gt ${SERVE_END_S:-480} ]; then echo "SKIP server $name"; return; fi
  st "server $name"; echo "llama-server -m model-run3.gguf $COMMON $*" > $R/server_$name.cmd
  $W/build/bin/llama-server -m $W/model-run3.gguf $COMMON "$@" > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 120 python3 $S/srv11.py 8090 $spid $R/server_$name.json $S/prompts11.txt 64 > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log; grep -E "decode|prompt" $R/server_$name.client.log | tail -3
  kill -TERM $spid 2>/dev/null
  for i in $(seq 80); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null; wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "llama_moe_cache|eval time" $R/server_$name.log | tail -4
  gzip -f $R/server_$name.log; keep server_$name.cmd server_$name.log.gz server_$name.json server_$name.client.log
}
serve full --moe-cache-mib 8376
serve c6278 --moe-cache-mib 6278
serve c2092 --moe-cache-mib 2092
serve c4185 --moe-cache-mib 4185
st done
