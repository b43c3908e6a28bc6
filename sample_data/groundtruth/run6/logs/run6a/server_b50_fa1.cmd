llama-server -m model-q4km.gguf -ngl 99 -lv 4 -c 16384 -np 1 --cpu-moe -fa on --moe-cache-mib 4185 --host 127.0.0.1 --port 8090
