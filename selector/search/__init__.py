"""Adaptive search: stop a variant as soon as a floor is out of reach (sequential), and walk the
candidates smallest first, pruning what a smaller eligible variant already beats (driver).

Pure: no Hydra, MLflow, torch or runner here; the sweep drives it. See docs/search.md.
"""
