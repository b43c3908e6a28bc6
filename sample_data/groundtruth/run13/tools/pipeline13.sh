#!/bin/bash
# run13 (issue 36): run12's pipeline (one machine: the CPU recording beside llama-server b11549 --cpu-moe with the
# cache) on a model whose greedy next token has a large logit margin (gen_model13.py), so that the CPU and the GPU
# decode the same tokens. Only the recording and the servers at 2,092 / 6,278 / 4,185 MiB (no membw, copy rate,
# upload or `off` server). The recorder's generated tokens go to gen_cpu.json, the successor map to succ.npy.
# usage (repo root, on the device): bash build/gt13/pipeline13.sh   (build/gt13: this folder; writes to $OUT)
set -u
S=$PWD/build/gt13; W=/root/w13; R=$W/res; mkdir -p $W/site $R
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
( cd $W/build && ninja -j12 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
st genmodel
python3 $S/gen_model13.py $S/model-header.gguf $S/tensors.json $W/model-run13.gguf 0.01 $R/succ.npy > $R/gen_model.log 2>&1
echo "gen rc $?"; cat $R/gen_model.log
st record  # beside the build (run12 recorded after it): the recording's timings are not what this run is for
PYTHONPATH=$W/site:$S/rec GEN_OUT=$R/gen_cpu.json timeout 200 python3 $S/rec13.py record --model $W/model-run13.gguf \
  --prompts $S/prompts11.txt -n 64 -c 8192 -b 2048 -ub 512 --threads 16 -o $OUT/cpu.npz --host-out $OUT/host.json \
  > $R/record.log 2>&1
echo "record rc $?"; tail -3 $R/record.log; cat $OUT/host.json
keep lscpu.txt cmake.log gen_model.log succ.npy gen_cpu.json record.log
st wait_build; wait $BPID; echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log; gzip -f $R/build.log; keep build.log.gz
COMMON="-ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090"
serve() { # name [extra args]; skipped once the call nears its limit
  local name=$1; shift
  if [ $(( $(date +%s) - T0 )) -gt ${SERVE_END_S:-500} ]; then echo "SKIP server $name"; return; fi
  st "server $name"; echo "llama-server -m model-run13.gguf $COMMON $*" > $R/server_$name.cmd
  $W/build/bin/llama-server -m $W/model-run13.gguf $COMMON "$@" > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 120 python3 $S/srv11.py 8090 $spid $R/server_$name.json $S/prompts11.txt 64 > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log; grep -E "decode|prompt" $R/server_$name.client.log | tail -3
  kill -TERM $spid 2>/dev/null
  for i in $(seq 80); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null; wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "llama_moe_cache|eval time" $R/server_$name.log | tail -4
  gzip -f $R/server_$name.log; keep server_$name.cmd server_$name.log.gz server_$name.json server_$name.client.log
}
serve c2092 --moe-cache-mib 2092
serve c6278 --moe-cache-mib 6278
serve c4185 --moe-cache-mib 4185
st done
