#!/bin/bash
# run11b (a second, short device call after run11's pipeline): run3's model written again (gen_model6.py, same seed:
# the same bytes), then the CPU recording repeated through tools/rec11.py with llama-server's start-up probe decode
# added (p*) and without it (n16, run11's recording again), at 16, 8 and 12 threads, keeping each prompt's generated
# tokens; llama.cpp's extra buffer types off as in run11 (the AMX SIGILL). Synchronous; results in $OUT.
# usage (from the repository root on the device): bash build/gt11/pipeline11b.sh
S=$PWD/build/gt11; W=/root/gtwork11b; R=$W/res
mkdir -p $R && cd $W
exec > >(tee $R/pipeline11b.log) 2>&1
export PYTHONUNBUFFERED=1
date; nproc; free -g | head -2; grep -m1 "model name" /proc/cpuinfo
mkdir -p site && tar xJf $S/site.tar.xz -C site
cp -a $S/rec rec_noextra
sed -i 's/^\(\s*\)params.n_gpu_layers = 0$/&\n\1params.use_extra_bufts = False/' rec_noextra/moe_model/record/llama.py
grep -n use_extra_bufts rec_noextra/moe_model/record/llama.py
export PYTHONPATH=$W/rec_noextra:$W/site
python3 $S/gen_model6.py $S/model-header.gguf $S/tensors.json $W/model-run3.gguf 0.01; date
for run in p16:16 p8:8 n16:16:noprobe p12:12; do
  IFS=: read name threads flag <<< "$run"
  timeout 150 python3 $S/rec11.py $W/model-run3.gguf $S/prompts11.txt $threads $R/cpu_$name.npz $R/tokens_$name.json $flag
  echo "$name rc $?"
done
tar czf $OUT/run11b.tar.gz -C $W res; cp $R/pipeline11b.log $OUT/; ls -la $OUT
