"""Log text the log reader's and the log timings' tests share."""

# a fork's log: its own build line and an automatic MoE cache size
FORK_LOG = """\
build: 7311 (8be0f219) with cc (Ubuntu 13.3.0) 13.3.0 for x86_64-linux-gnu
0.00.101.034 I common_params_fit_impl: automatic MoE cache = 1671.12 MiB (10% of 16711.20 MiB expert weights)
0.00.400.000 I llama_model_loader: loaded meta data with 35 key-value pairs and 579 tensors from /models/q.gguf
0.02.120.004 I llama_moe_cache:      CUDA0 MoE cache size =  1670.50 MiB, slots = 570
"""
