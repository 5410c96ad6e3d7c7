"""engine=vllm: everything vLLM-specific. engine.py is the kind (its config, knobs, load advice and
start), launch.py where vLLM is found, the command that starts it and what its log says (kernels,
KV pool), metrics.py what its /metrics call the figures selector reads (the queue/compute split,
prefix-cache counters, KV pool use)."""
