"""bench/percentile.py: the scripts' and tests' copy of brisk's one percentile definition
(src/common/percentile.h), pinned on the same hand-computed vectors as the C++ one
(tests/unit/run_statistics_test.cpp, Percentile.*)."""

from __future__ import annotations

import math
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
from percentile import percentile  # noqa: E402

# Shares nothing with other tests and measures no time: runs beside another test (Makefile).
pytestmark = pytest.mark.parallel


@pytest.mark.parametrize("q, expected", [(0, 1.0), (50, 2.5), (90, 3.7), (99, 3.97), (100, 4.0)])
def test_linear_between_closest_ranks_as_numpy_percentile(q, expected):
    # numpy.percentile([1, 2, 3, 4], q): rank q/100 x 3, then linear between its neighbours.
    assert percentile([1, 2, 3, 4], q) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("q, expected", [(25, 20.0), (37.5, 30.0), (50, 40.0), (90, 128.0),
                                         (99, 156.8)])
def test_uneven_gaps_and_unsorted_input(q, expected):
    # Ranks over [10, 20, 40, 80, 160]: 1, 1.5, 2, 3.6 and 3.96. Nearest-rank would say 20, 20,
    # 40, 160 and 160; the old statistics.median agrees only at q = 50.
    assert percentile([80, 10, 160, 40, 20], q) == pytest.approx(expected, abs=1e-12)


def test_one_value_and_none():
    assert percentile([42], 99) == 42
    assert math.isnan(percentile([], 50))
