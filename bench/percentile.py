"""brisk's one percentile definition, for the scripts in bench/ and the tests.

Linear between the closest ranks, numpy.percentile's default, as brisk bench's summaries
(src/common/percentile.h) and brisk plan's burst simulation use: p99 of 64 samples is 0.37 of
the way from the 63rd to the 64th smallest. statistics.median is the same at q=50.
"""

from __future__ import annotations


def percentile(values, q: float) -> float:
    """The q-th percentile (q in [0, 100]) of `values`; nan when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
