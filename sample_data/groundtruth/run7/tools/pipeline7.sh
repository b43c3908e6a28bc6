#!/bin/bash
# run7: is run5's CPU-path long/short decode ratio (0.82 at 6.1k context) the time model's miss or request-to-request
# variation? The CPU expert path (--cpu-moe, no cache, -fa off, mmap'd: run5's mm_off) answers short (147-token prompt)
# and long (run5's 6,084-token prompt) requests interleaved, 128 tokens each, on two fresh servers; a GPU-resident
# server the same way for reference. run3's header + random weights (gen_model6.py, OUT_SCALE 0.01), build b11549.
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
  -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-q4km.gguf ${OUT_SCALE:-1} > $R/gen_model.log 2>&1; echo "gen rc $?"; cat $R/gen_model.log
stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -3 $R/build.log
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
B=$W/build/bin; M=$W/model-q4km.gguf
$B/llama-server --version 2>&1 | head -3
SP=$S/prompt_short.txt; LP=$S/prompt_6k.txt
PAIRS="s1:$SP:128:1 L1:$LP:128:1 s2:$SP:128:1 L2:$LP:128:1 s3:$SP:128:1 L3:$LP:128:1 s4:$SP:128:1 L4:$LP:128:1 s5:$SP:128:1"
run() { # name [args]
  local name=$1; shift 1
  stage "server $name"
  echo "llama-server -m model-q4km.gguf -ngl 99 -fa off -lv 4 -c 16384 -np 1 $* --host 127.0.0.1 --port 8090" > $R/server_$name.cmd
  $B/llama-server -m $M -ngl 99 -fa off -lv 4 -c 16384 -np 1 "$@" --host 127.0.0.1 --port 8090 > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 500 python3 $S/srv5.py 8090 $spid $R/server_$name.json warm:$SP:64:1 $PAIRS > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  cat $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 120); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  gzip -f $R/server_$name.log
}
run off_a --cpu-moe
run off_b --cpu-moe
run gpu
stage done
touch $R/DONE
