"""Combining the peaks of two stretches of one phase (selector.resources.memory.higher): the serving
peak is the higher of what it held before fidelity's probe passes and after them."""

from __future__ import annotations

from selector.resources.memory import higher
from selector.records import PeakMemory

GB = 2**30


def test_the_higher_of_two_peaks_field_by_field() -> None:
    before = PeakMemory(rss_bytes=3 * GB, cuda_allocated_bytes=None, cuda_reserved_bytes=2 * GB)
    after = PeakMemory(rss_bytes=2 * GB, cuda_allocated_bytes=GB, cuda_reserved_bytes=4 * GB)
    both = higher(before, after)
    assert both == PeakMemory(rss_bytes=3 * GB, cuda_allocated_bytes=GB, cuda_reserved_bytes=4 * GB)
    assert higher(None, after) is after and higher(before, None) is before and higher(None, None) is None
