#!/bin/bash
# run6: decode at depth (135 / ~4k / ~12k tokens) with FA off and on, on the GPU, the CPU path and a 50 % cache;
# prefill at -ub 128/512/2048. run3's header + random weights (gen_model6.py), build b11549 with CUDA FA kernels.
S=$1; W=$2; R=$W/res
mkdir -p $R
exec > $R/pipeline.log 2>&1
stage() { echo "=== STAGE $1 $(date +%T) ==="; echo "$1 $(date +%T)" > $R/STAGE; }
export PYTHONUNBUFFERED=1
which nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
stage info
date; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g; lscpu | grep -E 'Model name|^CPU\(s\)'
stage build
cmake -S $S/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-q4km.gguf > $R/gen_model.log 2>&1; echo "gen rc $?"; cat $R/gen_model.log
stage bandwidth
python3 $S/bw6.py $R/bw.json > $R/bw.log 2>&1; cat $R/bw.log
stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -3 $R/build.log
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
B=$W/build/bin; M=$W/model-q4km.gguf
$B/llama-server --version 2>&1 | head -3
SP=$S/prompt_short.txt; P4=$S/prompt_4k.txt; P12=$S/prompt_12k.txt
B50=4185
run() { # name [args]
  local name=$1; shift 1
  stage "server $name"
  echo "llama-server -m model-q4km.gguf -ngl 99 -lv 4 -c 16384 -np 1 $* --host 127.0.0.1 --port 8090" > $R/server_$name.cmd
  $B/llama-server -m $M -ngl 99 -lv 4 -c 16384 -np 1 "$@" --host 127.0.0.1 --port 8090 > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 400 python3 $S/srv5.py 8090 $spid $R/server_$name.json warm:$SP:64:1 short1:$SP:128:1 short2:$SP:128:1 \
    d4k:$P4:128:1 d12k:$P12:128:1 short3:$SP:128:1 > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  cat $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 120); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "model buffer size|MoE cache size|llama_moe_cache:|too small|KV self size|KV buffer" $R/server_$name.log | head -8
}
run off_fa0 --cpu-moe -fa off
run off_fa1 --cpu-moe -fa on
run b50_fa0 --cpu-moe -fa off --moe-cache-mib $B50
run gpu_fa0 -fa off
run b50_fa1 --cpu-moe -fa on --moe-cache-mib $B50
run gpu_fa1 -fa on
touch $R/CORE_DONE
run off_fa0_ub2048 --cpu-moe -fa off -b 2048 -ub 2048
run b50_fa0_ub128 --cpu-moe -fa off --moe-cache-mib $B50 -ub 128
run off_fa0_nkvo --cpu-moe -fa off -nkvo
stage done
touch $R/DONE
