"""The preparation process says what else ran on the machine while it converted and quantized (a
line of the record's `config.prepared`): on 2 cores one busy neighbour, or a hypervisor's steal,
made GPTQ take 1.7 times as long, and a time without that line cannot be told from a regression."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from selector.measure.contention import CpuShare
from selector.variant.prepare import machine_load

SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


def test_a_busy_neighbour_is_named() -> None:
    neighbour = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # it is running before the block starts
        with CpuShare() as share:
            time.sleep(1.5)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert share.other is not None and share.other >= 0.5 / share.cores  # half a core at least, shared or not
    line = machine_load(share)
    found = re.fullmatch(r"other processes took (\d+)% of the (\d+) cores meanwhile( \(busy: .*\))?", line)
    assert found and abs(int(found.group(1)) - share.other * 100) <= 0.5 and int(found.group(2)) == share.cores, line
    assert bool(found.group(3)) == (share.other >= 0.25)
    share.other = 0.6  # as on the machine, whatever this one's neighbours did
    assert machine_load(share).endswith("(busy: it took longer than it would on a quiet machine)")


def test_too_short_to_say() -> None:
    with CpuShare() as share:
        pass
    assert machine_load(share) == "other processes' share of the CPU: not measured (under a second)"
