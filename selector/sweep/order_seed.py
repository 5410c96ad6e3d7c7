"""The seed of the item order adaptive search scores each task's items in (docs/search.md).

Early rejection's guarantee is over that order, so one fixed order for every sweep of an eval set
(the old `seed: 0`) made alpha one draw per eval set: every sweep, everywhere, shared the same
luck. The order is now drawn once per eval set and output folder, at the first sweep's start,
and kept there (`<output_dir>/evaluations/order_seeds.json`):

- drawn, so output folders (people, machines, projects) get independent orders;
- kept, so a later sweep in the same folder cannot give a stopped variant a second chance with a
  new order (its stored items are read in the order it was stopped in);
- recorded in the sweep's state (sweep.json), every record's `search.order_seed` and the report;
- replayable: `search.seed=N` (or `seed=N` on the command line) fixes it, whatever is kept.

Within a sweep every variant shares the order: prefixes pair up item by item (non-inferiority).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from filelock import FileLock

ORDER_SEEDS = "order_seeds.json"


def resolve(search_seed: int | None, seed: int, seed_given: bool, output_dir: str | Path,
            evalset_hash: str) -> tuple[int, str]:
    """(order seed, where it came from): search.seed, then a `seed=` given on the command line,
    then the one kept for this eval set in this output folder, else a fresh draw (kept)."""
    if search_seed is not None:
        return int(search_seed), "search.seed"
    if seed_given:
        return int(seed), "seed"
    folder = Path(output_dir) / "evaluations"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ORDER_SEEDS
    with FileLock(str(path) + ".lock", timeout=60):
        kept = json.loads(path.read_text()) if path.exists() else {}
        if evalset_hash in kept:
            return int(kept[evalset_hash]), "kept"
        drawn = secrets.randbelow(2**31)
        kept[evalset_hash] = drawn
        path.write_text(json.dumps(kept, indent=2))
    return drawn, "drawn"
