"""One variant's run: its job, the worker process that runs it, the pipeline (prepare, load, evaluate,
measure), its keys and its job folder. Imported by the sweep (selector.sweep), never the reverse."""
