"""engine=hf: transformers in the variant's own process. engine.py is the kind (loading, memory,
the timed channel), evaluator.py batched generation and scoring, fast.py the static-cache compiled
decode, greedy.py greedy decoding that drops finished rows, batching.py the dynamic batching
scheduler every timed request goes through."""
