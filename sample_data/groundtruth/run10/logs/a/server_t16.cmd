taskset -c 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 llama-server -m model-q4km.gguf -ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090 -t 16
