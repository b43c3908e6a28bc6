#!/bin/bash
# run8 (issue 29): (1) decode at depth: 64 tokens after ~150, 8k, 32k, 64k-token prompts (and 128k on one server),
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
DEPTH="warm:$SP:16 d0:$SP:64 d8k:$S/prompt_8k.txt:64 d32k:$S/prompt_32k.txt:64 d64k:$S/prompt_64k.txt:64 d0b:$SP:64"
DEEP="$DEPTH d128k:$S/prompt_128k.txt:64"
C64="-b 2048 -ub 2048 -c 69632"
run cpu_fa16 200 - "$DEPTH" --cpu-moe -fa on $C64
run gpu_fa16 200 - "$DEEP" -fa on -b 2048 -ub 2048 -c 133120
run cpu_nofa 200 - "$DEPTH" --cpu-moe -fa off $C64
run gpu_nofa 150 - "$DEPTH" -fa off $C64
touch $R/SWEEP_DONE
stage disk
sync; echo 3 > /proc/sys/vm/drop_caches; free -m
echo "dd direct:"; timeout -s INT 40 dd if=$M of=/dev/null bs=4M count=1024 iflag=direct 2>&1 | tail -1
sync; echo 3 > /proc/sys/vm/drop_caches
echo "dd buffered cold:"; timeout -s INT 40 dd if=$M of=/dev/null bs=4M count=1024 2>&1 | tail -1
echo "dd buffered warm (same 4 GiB, now cached):"; timeout -s INT 40 dd if=$M of=/dev/null bs=4M count=1024 2>&1 | tail -1
# memory limit: cgroup v2 (mount one if none), else v1
CGR=$(awk '$3=="cgroup2"{print $2; exit}' /proc/mounts)
if [ -z "$CGR" ]; then mkdir -p /tmp/cg2 && mount -t cgroup2 none /tmp/cg2 && CGR=/tmp/cg2; fi
echo "cgroup2 root: $CGR; controllers: $(cat $CGR/cgroup.controllers 2>/dev/null)"
echo +memory > $CGR/cgroup.subtree_control 2>&1; echo "subtree_control: $(cat $CGR/cgroup.subtree_control 2>/dev/null)"
mkcg() { # name bytes -> path
  local d=$CGR/gt8_$1; mkdir -p $d 2>/dev/null && echo $2 > $d/memory.max 2>/dev/null && [ -f $d/memory.current ] && echo $d
}
CG6=$(mkcg 6g $((6*1024*1024*1024))); CG4=$(mkcg 4g $((4*1024*1024*1024)))
echo "cgroups: 6g=${CG6:-FAILED} 4g=${CG4:-FAILED}"; [ -n "$CG6" ] && cat $CG6/memory.max
RAMQ="warm:$SP:8 r1:$SP:32 r2:$SP:32"
C16="-fa off -c 16384"
ramrun() { # name timeout cg [args]
  local name=$1 tmo=$2 cg=$3; shift 3
  if [ "$cg" != - ] && [ -z "$cg" ]; then echo "SKIP $name: no cgroup"; return; fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  local d0=$(awk -v d=$DISK '$3==d{print $6*512}' /proc/diskstats)
  run $name $tmo $cg "$RAMQ" "$@"
  echo "$name disk bytes read during server: $(( $(awk -v d=$DISK '$3==d{print $6*512}' /proc/diskstats) - d0 ))"
}
ramrun ram_ctl_off 90 - --cpu-moe $C16
ramrun ram_6g_off 120 "$CG6" --cpu-moe $C16
ramrun ram_4g_off 120 "$CG4" --cpu-moe $C16
ramrun ram_6g_c75 100 "$CG6" --cpu-moe --moe-cache-mib 6278 $C16
ramrun ram_4g_c75 100 "$CG4" --cpu-moe --moe-cache-mib 6278 $C16
touch $R/RAM_DONE
run gpu_faq8 150 - "$DEPTH" -fa on -ctk q8_0 -ctv q8_0 $C64
ramrun ram_ctl_c75 90 - --cpu-moe --moe-cache-mib 6278 $C16
stage done
touch $R/DONE
