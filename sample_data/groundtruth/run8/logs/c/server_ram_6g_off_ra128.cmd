llama-server -m model-q4km.gguf -ngl 99 -lv 4 -np 1 --cache-ram 0 --host 127.0.0.1 --port 8090 --cpu-moe -fa off -c 16384  (cgroup: /sys/fs/cgroup/gt8_6g 6442450944)
