#!/bin/bash
# run8c (issue 29), a fresh machine after the first was given back: same build and model as pipeline8.sh; the deep
# requests again with --override-kv qwen3moe.context_length=int:133120 (pipeline8.sh's servers capped the slot
# context at the training context, 40960, and refused 64k/128k), then the 6 GiB limit with read_ahead_kb 128 (a common
# NVMe default; this drive has 8192) and with a 75 % cache. pipeline8.sh's header follows:
# short again at the end, on GPU-resident and --cpu-moe servers, flash attention on/off, f16 and q8_0 KV;
# (2) mmap'd --cpu-moe experts (8,370 MiB) larger than a memory limit (cgroup memory.max), with/without a 75 % cache,
# after dropping the page cache, the drive's read rate measured on the model file. run3's header + random weights
# (run6's gen_model6.py, OUT_SCALE 0.01), build b11549 WITH the CUDA flash-attention kernels.
# usage: pipeline8.sh <src copy of .gt> <workdir>
S=$1; W=$2; R=$W/res
mkdir -p $R
exec > $R/pipeline.log 2>&1
stage() { echo "=== STAGE $1 $(date +%T) ==="; echo "$1 $(date +%T)" > $R/STAGE; }
export PYTHONUNBUFFERED=1
which nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
stage info
date; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; free -g; lscpu | grep -E 'Model name|^CPU\(s\)'
lsblk -o NAME,SIZE,ROTA,TYPE,MOUNTPOINT 2>/dev/null; df -h $W; grep -E 'cgroup' /proc/mounts; uname -r
DISK=$(lsblk -no PKNAME $(df --output=source $W | tail -1) 2>/dev/null | head -1); [ -n "$DISK" ] && [ -d /sys/block/$DISK ] || DISK=$(basename $(df --output=source $W | tail -1))
[ -d /sys/block/$DISK ] || DISK=$(ls /sys/block | grep -vE "^(loop|ram|zram|dm-)" | head -1); export DISK
echo "disk for $W: $DISK"; cat /sys/block/$DISK/queue/read_ahead_kb 2>/dev/null
stage build
cmake -S $S/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $R/cmake.log 2>&1 || echo CMAKE_FAILED
( cd $W/build && ninja -j16 llama-server > $R/build.log 2>&1; echo $? > $R/build.rc ) &
BPID=$!
stage genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-q4km.gguf ${OUT_SCALE:-1} > $R/gen_model.log 2>&1; echo "gen rc $?"; cat $R/gen_model.log
python3 $S/mkprompts8.py $S/prompt_long.txt $S 8000 32000 64000 128000
stage wait_build
wait $BPID
echo "build rc $(cat $R/build.rc)"; tail -2 $R/build.log; grep -E 'FA|FLASH' $W/build/CMakeCache.txt | head
if [ "$(cat $R/build.rc)" != 0 ]; then stage build_failed; grep -B2 -A20 -m3 'error' $R/build.log | head -80; touch $R/DONE; exit 1; fi
B=$W/build/bin; M=$W/model-q4km.gguf
$B/llama-server --version 2>&1 | head -3
SP=$S/prompt_short.txt
COMMON="-ngl 99 -lv 4 -np 1 --cache-ram 0 --host 127.0.0.1 --port 8090"
run() { # name timeout_s cgroup_dir(or -) "requests" [args]
  local name=$1 tmo=$2 cg=$3 reqs=$4; shift 4
  stage "server $name"
  [ "$cg" = - ] && cg=""
  echo "llama-server -m model-q4km.gguf $COMMON $*  (cgroup: ${cg:-none} $( [ -n "$cg" ] && cat $cg/memory.max ))" > $R/server_$name.cmd
  if [ -n "$cg" ]; then
    bash -c "echo \$\$ > $cg/cgroup.procs && exec $B/llama-server -m $M $COMMON $*" > $R/server_$name.log 2>&1 &
  else
    $B/llama-server -m $M $COMMON "$@" > $R/server_$name.log 2>&1 &
  fi
  local spid=$!
  CG=$cg timeout $tmo python3 $S/srv8.py 8090 $spid $R/server_$name.json $reqs > $R/server_$name.client.log 2>&1
  echo "client rc $?" >> $R/server_$name.client.log
  cat $R/server_$name.client.log
  [ -n "$cg" ] && { echo "memory.events: $(tr '\n' ' ' < $cg/memory.events)"; echo "memory.peak: $(cat $cg/memory.peak 2>/dev/null)"; } | tee -a $R/server_$name.client.log
  kill -TERM $spid 2>/dev/null
  for i in $(seq 120); do kill -0 $spid 2>/dev/null || break; sleep 0.25; done
  kill -9 $spid 2>/dev/null
  wait $spid; echo "exit_code=$?" >> $R/server_$name.log
  grep -E "model buffer size|KV buffer|compute buffer|MoE cache size|llama_moe_cache:|load_mode" $R/server_$name.log | head -10
  gzip -f $R/server_$name.log
}
OV="--override-kv qwen3moe.context_length=int:133120 -b 2048 -ub 2048"
run deep_cpu_fa16 90 - "warm:$SP:16 d0:$SP:64 d64k:$S/prompt_64k.txt:64 d0b:$SP:64" --cpu-moe -fa on -c 69632 $OV
CG6=/sys/fs/cgroup/gt8_6g; mkdir -p $CG6; echo $((6*1024*1024*1024)) > $CG6/memory.max; echo "6g cgroup: $(cat $CG6/memory.max)"
RA0=$(cat /sys/block/$DISK/queue/read_ahead_kb)
sync; echo 3 > /proc/sys/vm/drop_caches; echo 128 > /sys/block/$DISK/queue/read_ahead_kb; echo "read_ahead_kb $(cat /sys/block/$DISK/queue/read_ahead_kb)"
run ram_6g_off_ra128 50 $CG6 "warm:$SP:8 r1:$SP:32 r2:$SP:32" --cpu-moe -fa off -c 16384
echo $RA0 > /sys/block/$DISK/queue/read_ahead_kb; echo "read_ahead_kb $(cat /sys/block/$DISK/queue/read_ahead_kb)"
run deep_gpu_fa16 80 - "warm:$SP:16 d0:$SP:64 d64k:$S/prompt_64k.txt:64 d128k:$S/prompt_128k.txt:64 d0b:$SP:64" -fa on -c 133120 $OV
sync; echo 3 > /proc/sys/vm/drop_caches
run ram_6g_c75 80 $CG6 "warm:$SP:8 r1:$SP:32 r2:$SP:32" --cpu-moe --moe-cache-mib 6278 -fa off -c 16384
stage done
touch $R/DONE
