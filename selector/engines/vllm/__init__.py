"""engine=vllm: everything vLLM-specific. engine.py is the kind (its config, knobs and start),
launch.py where vLLM is found, the command that starts it and what its log says."""
