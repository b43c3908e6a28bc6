#!/bin/bash
# each device call: start pipeline11.sh once in its own session, wait up to $1 s, bring back what exists
# usage (from the repository root on the device): bash build/gt11/launch11.sh [WAIT_S] [BENCH_END_S]
W=/root/gtwork11; LIMIT=${1:-540}
mkdir -p $W
if [ ! -f $W/started ]; then
  rm -rf $W/src && cp -a build/gt11 $W/src && tar xJf $W/src/llama.cpp.tar.xz -C $W/src && touch $W/started
  BENCH_END_S=${2:-99999} setsid nohup bash $W/src/pipeline11.sh $W/src $W > $W/nohup.log 2>&1 < /dev/null &
  sleep 2
fi
t0=$(date +%s)
while [ ! -f $W/res/DONE ] && [ $(( $(date +%s) - t0 )) -lt $LIMIT ]; do sleep 3; done
echo "--- STAGE: $(cat $W/res/STAGE 2>/dev/null)  waited $(( $(date +%s) - t0 )) s"
tail -c 7000 $W/res/pipeline.log
echo "--- build: $(tail -1 $W/res/build.log 2>/dev/null)"; cat $W/nohup.log 2>/dev/null | tail -3
cp $W/res/pipeline.log $OUT/pipeline.log 2>/dev/null
tar czf $OUT/results.tar.gz --exclude='*.gguf' -C $W res
ls -la $OUT
