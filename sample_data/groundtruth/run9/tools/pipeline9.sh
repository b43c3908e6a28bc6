#!/bin/bash
# run9: llama.cpp's --fit at an emulated free size (F MiB free on the H200 via -fitt M, M = free - F + 1024, the
# fit-trials method) that leaves about half the layers' experts in host memory, against --cpu-moe with and without
# the MoE cache; prompts of ~135, 512, 2048, 6000 tokens (run5's prompt_long.txt cut), 32 tokens decoded each, -ub 512.
# Same build (b11549, CUDA FA kernels on) and model (run3's header + random weights, gen_model6.py) as run8.
# usage: pipeline9.sh <src copy of build/gt9> <workdir>
S=$1; W=$2; R=$W/res
mkdir -p $R
exec > $R/pipeline.log 2>&1
stage() { echo "=== STAGE $1 $(date +%T) ==="; echo "$1 $(date +%T)" > $R/STAGE; }
export PYTHONUNBUFFERED=1
which nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
stage info
date; nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv; nproc; free -g; lscpu | grep -E 'Model name|^CPU\(s\)'; uname -r
stage build
cmake -S $S/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-q4km.gguf ${OUT_SCALE:-1} > $R/gen_model.log 2>&1; echo "gen rc $?"; cat $R/gen_model.log
python3 $S/mkprompts9.py $S/prompt_long.txt $S 135 512 2048 6000
stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
B=$W/build/bin; M=$W/model-q4km.gguf
$B/llama-server --version 2>&1 | head -3
COMMON="-lv 4 -np 1 -fa off --cache-ram 0 -c 8192 --host 127.0.0.1 --port 8090"
REQS="warm:$S/prompt_135.txt:8 p135:$S/prompt_135.txt:32 p512:$S/prompt_512.txt:32 p2048:$S/prompt_2048.txt:32 p6000:$S/prompt_6000.txt:32"
run() { # name timeout_s [args]
  local name=$1 tmo=$2; shift 2
  stage "server $name"
  echo "llama-server -m model-q4km.gguf $COMMON $*" > $R/server_$name.cmd
  $B/llama-server -m $M $COMMON "$@" > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout $tmo python3 $S/srv9.py 8090 $spid $R/server_$name.json $REQS > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  cat $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 120); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "MiB free|common_params_fit|set ngl_per_device|overflow|model buffer size|KV buffer|compute buffer|MoE cache size|llama_moe_cache:|abort" $R/server_$name.log | head -40
  gzip -f $R/server_$name.log
}
FREE=142629; F=6400; FITT=$((FREE - F + 1024)); echo "emulated free F=$F MiB: -fitt $FITT (free as fit-trials logged: $FREE)"
# --fit aborts when -ngl is given (common/fit.cpp: "n_gpu_layers already set by user"), so this server leaves -ngl at its default
run fit 150 -fit on -fitt $FITT
run cpu_moe 120 -ngl 99 --cpu-moe
run cpu_moe_c4185 120 -ngl 99 --cpu-moe --moe-cache-mib 4185
stage done
touch $R/DONE
