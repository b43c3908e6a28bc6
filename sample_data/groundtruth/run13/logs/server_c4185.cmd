llama-server -m model-run13.gguf -ngl 99 --cpu-moe -fa off -c 8192 -np 1 -lv 4 --cache-ram 0 --host 127.0.0.1 --port 8090 --moe-cache-mib 4185
