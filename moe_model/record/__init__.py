"""`record`: the user's own model run on their CPU through llama-cpp-python (an optional extra), writing the
routing llama.cpp selected (a recorded trace the simulator replays exactly) and a host record (the CPU's speed
on this model). llama-cpp-python is imported only when a recording starts (runtime.load_runtime)."""
