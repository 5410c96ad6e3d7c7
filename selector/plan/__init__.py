"""Plans made before anything loads: a model's architecture facts (arch) and the memory a variant
would need (estimate). `python -m selector plan` prints them (selector/commands/plan.py)."""
