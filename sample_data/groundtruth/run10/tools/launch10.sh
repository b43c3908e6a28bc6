#!/bin/bash
# each device call: start pipeline10.sh once in its own session, wait up to $1 s, bring back what exists
W=/root/gtwork10; LIMIT=${1:-540}; PIPE=${2:-pipeline10.sh}
mkdir -p $W
if [ ! -f $W/started ]; then
  rm -rf $W/src && cp -a build/gt10 $W/src && tar xJf $W/src/llama.cpp.tar.xz -C $W/src && touch $W/started
  OUT_SCALE=0.01 setsid nohup bash $W/src/$PIPE $W/src $W > $W/nohup.log 2>&1 < /dev/null &
  sleep 2
fi
t0=$(date +%s)
while [ ! -f $W/res/DONE ] && [ $(( $(date +%s) - t0 )) -lt $LIMIT ]; do sleep 3; done
echo "--- STAGE: $(cat $W/res/STAGE 2>/dev/null)  elapsed $(( $(date +%s) - t0 )) s"
tail -c 9000 $W/res/pipeline.log
echo "--- build: $(tail -1 $W/res/build.log 2>/dev/null)"
cp $W/res/pipeline.log $OUT/pipeline.log 2>/dev/null
tar czf $OUT/results.tar.gz -C $W res
ls -la $OUT
