#!/bin/bash
# run11c (issue 36): the recorder's CPU timing with llama.cpp's own OpenMP wait policy (the fix) against the
# PASSIVE policy moe_model used to leave set (run11's host record), on run11's model and prompts, same VM kind.
# usage (repo root): bash build/gt11/pipeline11c.sh   (writes to $OUT)
set -u
S=build/gt11; W=/root/w11c; mkdir -p $W/site
T0=$(date +%s); st() { echo "=== $1 +$(( $(date +%s) - T0 )) s"; }
st info; lscpu | grep -E 'Model name|^CPU\(s\)|Model:'; free -g | head -2; python3 --version
tar xJf $S/site.tar.xz -C $W/site
st genmodel
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-run3.gguf 0.01 > $OUT/gen_model.log 2>&1; echo "gen rc $?"
export PYTHONPATH=$W/site:$PWD PYTHONUNBUFFERED=1
rec() { # name [env...]
  st "record $1"; local name=$1; shift
  env "$@" timeout 150 python3 -m moe_model record --model $W/model-run3.gguf --prompts $S/prompts11.txt -n 64 -c 8192 \
    -b 2048 -ub 512 --threads 16 -o $W/cpu_$name.npz --host-out $OUT/host_$name.json > $OUT/record_$name.log 2>&1
  echo "$name rc $?"; tail -3 $OUT/record_$name.log
}
rec default
rec passive OMP_WAIT_POLICY=PASSIVE
rec default2
python3 -c "import numpy as np; a=np.load('$W/cpu_default.npz'); b=np.load('$W/cpu_passive.npz'); print('same routing', all((a[k]==b[k]).all() for k in a.files))"
st done
