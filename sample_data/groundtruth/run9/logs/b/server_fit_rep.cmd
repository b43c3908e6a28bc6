llama-server -m model-q4km.gguf -lv 4 -np 1 -fa off --cache-ram 0 -c 8192 --host 127.0.0.1 --port 8090 -fit on -fitt 137253
