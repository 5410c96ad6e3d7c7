"""Selection: pure functions over RunRecords and a PolicyConfig that pick a variant and say why.

`select(records, policy)` is the entry point; the submodules hold one job each: precision order and
reference (precision), reading measurements (measures), intervals and paired differences
(evidence), constraints (checks), ranking (ranking), Pareto/sensitivity/sample size (analysis),
and the sentence and warnings (summary). See docs/selection.md.
"""

from selector.selection.analysis import pareto_front
from selector.selection.core import select
from selector.selection.measures import LatencyKey, parse_latency_key
from selector.selection.precision import pick_reference, precision_bits

__all__ = ["LatencyKey", "pareto_front", "parse_latency_key", "pick_reference", "precision_bits", "select"]
