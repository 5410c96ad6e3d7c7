"""Serving a variant: an OpenAI-compatible server process per variant (process.py, session.py), an
in-process dynamic batching scheduler in front of a transformers model (batching.py), what one
request's clock readings were (trace.py), a server's own Prometheus metrics (prometheus.py), the
serving knobs a sweep may vary (knobs.py) and where a load level's time went (diagnosis.py).

Nothing is imported here, so `selector.engines.openai` can use trace.py without pulling in the rest.
"""
