"""Serving a variant: an OpenAI-compatible server process per variant (process.py, session.py), an
in-process dynamic batching scheduler in front of a transformers model (batching.py), what one
request's clock readings were (trace.py) and a server's own Prometheus metrics (prometheus.py).

Nothing is imported here, so `selector.engines.openai` can use trace.py without pulling in the rest.
"""
