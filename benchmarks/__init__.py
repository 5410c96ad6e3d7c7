"""Side-by-side benchmarks of selector against the tools people use today (lm-eval, optimum-benchmark).

Run them from the repository root: `python -m benchmarks.vs_lm_eval`, `python -m benchmarks.vs_optimum_benchmark`.
See benchmarks/README.md.
"""
