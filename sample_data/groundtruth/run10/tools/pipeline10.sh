#!/bin/bash
# run10: --cpu-moe decode and prompt speed against llama.cpp's thread count -t N (2, 4, 8, 16, and the default),
# each server pinned with taskset to N physical cores (one logical CPU per core, lscpu -p). Same build (b11549, CUDA
# FA kernels on) and model (run3's header + random weights, gen_model6.py) as run8/run9. Requests: warm-up (148
# tokens, 8 decoded), a ~150-token prompt with 64 decoded twice, a ~2,000-token prompt with 32 decoded.
# usage: pipeline10.sh <src copy of build/gt10> <workdir>
S=$1; W=$2; R=$W/res
mkdir -p $R
exec > $R/pipeline.log 2>&1
stage() { echo "=== STAGE $1 $(date +%T) ==="; echo "$1 $(date +%T)" > $R/STAGE; }
export PYTHONUNBUFFERED=1
which nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
stage info
date; nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv; nproc; free -g; uname -r
lscpu > $R/lscpu.txt; lscpu -e > $R/lscpu_e.txt; cat $R/lscpu.txt; cat $R/lscpu_e.txt
grep -m1 -E 'flags' /proc/cpuinfo | tr ' ' '\n' | grep -E 'avx512_vnni|avx512f$|avx2|amx' | tr '\n' ' '; echo
grep MHz /proc/cpuinfo | sort | uniq -c
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1 | head -2
# one logical CPU per physical core, in core order
CORES=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | awk -F, '!s[$2]++ {print $1}' | tr '\n' ' ')
echo "one cpu per core: $CORES"
stage membw
gcc -O3 -march=native -fopenmp $S/membw10.c -o $W/membw10 && for n in 1 2 4 8 16; do
  OMP_NUM_THREADS=$n OMP_PROC_BIND=close OMP_PLACES=cores $W/membw10; done | tee $R/membw.txt
stage build
cmake -S $S/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-q4km.gguf ${OUT_SCALE:-1} > $R/gen_model.log 2>&1; echo "gen rc $?"; cat $R/gen_model.log
python3 $S/mkprompts10.py $S/prompt_long.txt $S 135 2000
stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
gzip -f $R/cmake.log $R/build.log
B=$W/build/bin; M=$W/model-q4km.gguf
$B/llama-server --version 2>&1 | head -3
COMMON="-ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090"
REQS="warm:$S/prompt_135.txt:8 p150a:$S/prompt_135.txt:64 p150b:$S/prompt_135.txt:64 p2000:$S/prompt_2000.txt:32"
run() { # name n_threads (0 = default, no -t, no taskset)
  local name=$1 n=$2 pre="" targs=""
  if [ "$n" != 0 ]; then
    local cpus=$(echo $CORES | tr ' ' '\n' | head -$n | paste -sd,)
    [ $(echo $CORES | wc -w) -lt $n ] && cpus=$(seq -s, 0 $((n - 1)))  # fewer cores than threads: logical CPUs
    pre="taskset -c $cpus"; targs="-t $n"
  fi
  stage "server $name"
  echo "$pre llama-server -m model-q4km.gguf $COMMON $targs" > $R/server_$name.cmd
  $pre $B/llama-server -m $M $COMMON $targs > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 150 python3 $S/srv10.py 8090 $spid $R/server_$name.json $REQS > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  taskset -pc $spid >> $R/server_$name.client.log 2>&1
  cat $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 120); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "n_threads|system_info|CPU_Mapped model buffer|CUDA0 model buffer" $R/server_$name.log | head -8
  gzip -f $R/server_$name.log
}
run t16 16
run t8 8
run t4 4
run t2 2
run tdef 0
stage done
touch $R/DONE
