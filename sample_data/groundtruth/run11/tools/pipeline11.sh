#!/bin/bash
# run11 (issue 36): (a) routing recorded on the CPU (`python -m moe_model record`, llama-cpp-python) beside llama-server
# b11549 `--cpu-moe` with the MoE cache at 2,092 / 4,185 / 6,278 MiB and without it, on run3's model (run3's header +
# random weights, out_scale 0.01, gen_model6.py), the same prompts (prompts11.txt, one request a paragraph); (b) the
# CPU expert path by quantization: llama-bench -ngl 0 (GPU hidden, experts kept in the plain mmap'd CPU buffer by
# -ot exps=CPU, as --cpu-moe) on one qwen3moe shape with the experts in each ggml type (gen_quant11.py), pinned to
# N = 2, 4, 8, 16 cores (--repack 0: no AMX or repacked buffer anywhere). Build: b11549 (xllamacpp 2026.10.11549's thirdparty/llama.cpp), CUDA sm_90, as run10.
# usage: pipeline11.sh <src copy of build/gt11> <workdir>     (env BENCH_END_S: no new bench type after that many s)
S=$1; W=$2; R=$W/res
mkdir -p $R
exec > $R/pipeline.log 2>&1
T0=$(date +%s)
stage() { echo "=== STAGE $1 $(date +%T) +$(( $(date +%s) - T0 )) s ==="; echo "$1 $(date +%T)" > $R/STAGE; }
export PYTHONUNBUFFERED=1
which nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
stage info
date; nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv; nproc; free -g; uname -r
python3 --version; df -h / $W
lscpu > $R/lscpu.txt; lscpu -e > $R/lscpu_e.txt; cat $R/lscpu.txt
{ lsblk -o NAME,SIZE,ROTA,TYPE,MOUNTPOINT,MODEL; echo; findmnt -T $W; echo; df -h; } > $R/drive.txt 2>&1; cat $R/drive.txt
head -5 /proc/meminfo
CORES=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | awk -F, '!s[$2]++ {print $1}' | tr '\n' ' ')
echo "one cpu per core: $CORES"
cpus_for() { local c; c=$(echo $CORES | tr ' ' '\n' | head -$1 | paste -sd,)
  [ $(echo $CORES | wc -w) -lt $1 ] && c=$(seq -s, 0 $(( $1 - 1 ))); echo $c; }

stage site
mkdir -p $W/site && tar xJf $S/site.tar.xz -C $W/site  # llama-cpp-python 0.3.36 (libs as symlinks), gguf, diskcache
export PYTHONPATH=$S/rec:$W/site
cd $W  # not the repository root: `python -m moe_model` must import the recorder's copy in $S/rec
python3 -c "import llama_cpp, gguf, numpy, moe_model, moe_model.record; print('llama_cpp', llama_cpp.__version__,
  'gguf', gguf.__file__, 'numpy', numpy.__version__, 'moe_model', moe_model.__file__)"
python3 -c "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"

stage membw
gcc -O3 -march=native -fopenmp $S/membw11.c -o $W/membw11 && for n in 1 2 4 8 16; do
  OMP_NUM_THREADS=$n OMP_PROC_BIND=close OMP_PLACES=cores $W/membw11; done | tee $R/membw.txt

stage build
cmake -S $S/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server llama-bench > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!

stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-run3.gguf 0.01 > $R/gen_model.log 2>&1
echo "gen rc $?"; cat $R/gen_model.log
# bench order = priority (Q4_K_u1: Q4_K with 1 expert used, the anchor for the fixed part of a token)
TYPES="Q4_K Q4_K_u1 Q8_0 Q6_K MXFP4 IQ4_XS IQ3_XXS IQ2_XXS Q2_K Q5_K Q4_0 Q3_K IQ4_NL IQ3_S IQ2_XS"
gen() { # type -> $W/q_<type>.gguf (skipped if present); info line appended to quant_models.jsonl
  local t=$1 qt=${1%_u1} used=8; [ "$t" != "$qt" ] && used=1
  [ -f $W/q_$t.gguf ] && return 0
  python3 $S/gen_quant11.py $W/q_$t.gguf $qt 8 $used >> $R/quant_models.jsonl 2>> $R/gen_quant.err
}
room() { [ $(df --output=avail -B1G $W | tail -1) -gt 16 ]; }
stage genquant
python3 $S/gen_quant11.py $W/q_check.gguf Q4_K 1 > $R/q_check.json
for t in $TYPES; do room && gen $t; done
ls -la $W/*.gguf; df -h $W; cat $R/quant_models.jsonl

stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
gzip -f $R/cmake.log $R/build.log
B=$W/build/bin; M=$W/model-run3.gguf
$B/llama-server --version 2>&1 | head -3

stage record
record() { # log-name: the recorder in $PYTHONPATH on run3's model, the server's batching, 16 threads
  timeout 420 python3 -m moe_model record --model $M --prompts $S/prompts11.txt -n 64 -c 8192 -b 2048 -ub 512 \
    --threads 16 -o $R/cpu.npz --host-out $R/host.json > $R/$1.log 2>&1
  local rc=$?; echo "$1 rc $rc"; tail -5 $R/$1.log; return $rc
}
# the helper's VM (same CPU model) died with SIGILL in ggml's AMX matmul on a quantized model's first prompt with
# llama.cpp's extra buffer types on: check here on a 1-layer Q4_K file; if it dies, record with them off
python3 $S/amxcheck11.py $W/q_check.gguf 1 > $R/amxcheck.log 2>&1; AMX_RC=$?; echo "amxcheck extra_bufts=1 rc $AMX_RC"
python3 $S/amxcheck11.py $W/q_check.gguf 0 >> $R/amxcheck.log 2>&1; echo "amxcheck extra_bufts=0 rc $?"
RREC=0; [ $AMX_RC = 0 ] && { record record; RREC=$?; }
if [ $AMX_RC != 0 ] || [ $RREC = 132 ]; then
  cp -a $S/rec $W/rec_noextra
  sed -i 's/^\(\s*\)params.n_gpu_layers = 0$/&\n\1params.use_extra_bufts = False/' $W/rec_noextra/moe_model/record/llama.py
  grep -n use_extra_bufts $W/rec_noextra/moe_model/record/llama.py
  PYTHONPATH=$W/rec_noextra:$W/site record record_noextra
fi
cat $R/host.json

COMMON="-ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090"
serve() { # name [extra args]
  local name=$1; shift
  stage "server $name"
  echo "llama-server -m model-run3.gguf $COMMON $*" > $R/server_$name.cmd
  $B/llama-server -m $M $COMMON "$@" > $R/server_$name.log 2>&1 &
  local spid=$!
  timeout 300 python3 $S/srv11.py 8090 $spid $R/server_$name.json $S/prompts11.txt 64 > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  cat $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 160); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "n_threads|CPU_Mapped model buffer|CUDA0 model buffer|llama_moe_cache" $R/server_$name.log | head -12
  gzip -f $R/server_$name.log
}
serve off
serve c2092 --moe-cache-mib 2092
serve c4185 --moe-cache-mib 4185
serve c6278 --moe-cache-mib 6278
rm -f $M

stage bench
for t in $TYPES; do
  if [ $(( $(date +%s) - T0 )) -gt ${BENCH_END_S:-99999} ]; then echo "SKIP $t: past BENCH_END_S"; continue; fi
  gen $t || { echo "GEN_FAILED $t"; continue; }
  for n in 2 4 8 16; do
    CUDA_VISIBLE_DEVICES= taskset -c $(cpus_for $n) $B/llama-bench -m $W/q_$t.gguf -ngl 0 -t $n -p 128 -n 32 -r 2 \
      -ot "exps=CPU" --repack 0 -o json -v > $R/bench_${t}_t$n.json 2> $R/bench_${t}_t$n.err
    echo "$t t$n rc $? $(grep -o '"avg_ts": [0-9.]*' $R/bench_${t}_t$n.json | tr '\n' ' ') \
      $(grep -m2 -E 'CPU_Mapped model buffer|CPU_REPACK' $R/bench_${t}_t$n.err | tr -s ' ' | tr '\n' ' ')"
  done
  gzip -f $R/bench_${t}_t*.err
  rm -f $W/q_$t.gguf
done
stage done
touch $R/DONE
