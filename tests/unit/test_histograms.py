"""Histogram windows: the difference of two cumulative scrapes (with resets), merging, and quantiles
interpolated inside buckets the way Prometheus' histogram_quantile does."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.histograms import Buckets, add, delta, from_series, highest, lowest, quantile, trim

INF = math.inf
B = (0.1, 0.5, 1.0, 5.0, INF)


def h(*counts: float, total: float = 0.0, bounds: tuple[float, ...] = B) -> Buckets:
    return Buckets(bounds, tuple(counts), total)


def test_from_series_reads_le_labels_and_sorts_them() -> None:
    got = from_series([("+Inf", 10.0), ("0.5", 4.0), ("0.1", 1.0), ("bogus", 3.0)], 2.5)
    assert got == Buckets((0.1, 0.5, INF), (1.0, 4.0, 10.0), 2.5)
    assert from_series([("x", 1.0)], 0.0) is None
    assert from_series([("1", 3.0)], 1.0) == Buckets((1.0, INF), (3.0, 3.0), 1.0), "a missing +Inf is added"


def test_the_window_is_the_difference_of_two_scrapes() -> None:
    before, now = h(1, 4, 6, 9, 10, total=20.0), h(3, 10, 14, 19, 20, total=45.0)
    assert delta(before, now) == h(2, 6, 8, 10, 10, total=25.0)
    assert delta(now, now).count == 0


@pytest.mark.parametrize("why", ["restart", "count went down", "one bucket went down", "no previous", "new bounds"])
def test_a_reset_makes_the_new_counts_the_window(why: str) -> None:
    before, now = h(1, 4, 6, 9, 10, total=20.0), h(0, 1, 2, 3, 3, total=4.0)
    restarted = False
    if why == "restart":
        now, restarted = h(5, 9, 9, 12, 12, total=30.0), True  # climbed past the old counts already
    elif why == "one bucket went down":
        now = h(0, 5, 7, 10, 11, total=21.0)
    elif why == "no previous":
        before = None  # type: ignore[assignment]
    elif why == "new bounds":
        now = Buckets((1.0, 10.0, INF), (4.0, 9.0, 12.0), 30.0)
    assert delta(before, now, restarted) == now


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    # 10 requests: 2 ≤ 0.1 s, 4 in (0.1, 0.5], 2 in (0.5, 1], 2 in (1, 5]
    x = h(2, 6, 8, 10, 10)
    assert quantile(x, 0.5) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)  # rank 5 → 3/4 into (0.1, 0.5]
    assert quantile(x, 0.1) == pytest.approx(0.05)  # rank 1 in the first bucket: from 0 to 0.1
    assert quantile(x, 0.95) == pytest.approx(1.0 + 4.0 * (9.5 - 8) / 2)
    assert quantile(x, 1.0) == 5.0
    assert quantile(h(0, 0, 0, 0, 0), 0.5) is None


def test_a_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    x = h(0, 0, 0, 1, 10)
    assert quantile(x, 0.99) == 5.0 and highest(x) == 5.0 and lowest(x) == 1.0
    assert highest(h(2, 6, 8, 8, 8)) == 1.0 and lowest(h(0, 6, 8, 8, 8)) == 0.1 and lowest(h(1, 1, 1, 1, 1)) == 0.0


def test_windows_add_up_and_different_bounds_meet_at_their_union() -> None:
    assert add([h(1, 2, 3, 4, 4, total=1.0), h(0, 1, 1, 1, 2, total=9.0)]) == h(1, 3, 4, 5, 6, total=10.0)
    other = Buckets((0.5, 2.0, INF), (2.0, 3.0, 3.0), 3.0)
    merged = add([h(1, 2, 3, 4, 4), other])
    assert merged is not None
    assert merged.bounds == (0.1, 0.5, 1.0, 2.0, 5.0, INF)
    assert merged.counts == (1.0, 4.0, 5.0, 6.0, 7.0, 7.0)
    assert add([]) is None


counts = st.lists(st.integers(0, 50), min_size=len(B), max_size=len(B)).map(
    lambda xs: tuple(float(sum(xs[: i + 1])) for i in range(len(xs))))


@given(counts, counts, st.floats(0.0, 1.0))
def test_quantiles_stay_inside_the_observed_buckets_and_windows_never_go_negative(a: tuple[float, ...],
                                                                                  b: tuple[float, ...],
                                                                                  q: float) -> None:
    before, now = h(*a), h(*(x + y for x, y in zip(a, b, strict=True)))
    window = delta(before, now)
    assert all(c >= 0 for c in window.counts) and window.counts == tuple(sorted(window.counts))
    assert window.count == b[-1]
    value = quantile(window, q)
    if window.count == 0:
        assert value is None
    else:
        assert value is not None and (lowest(window) or 0.0) <= value <= (highest(window) or 0.0)


def test_trimming_keeps_the_distribution_on_fewer_bounds() -> None:
    bounds = (0.1, 0.5, 1.0, 5.0, 10.0, 20.0, INF)
    x = Buckets(bounds, (0.0, 0.0, 3.0, 7.0, 7.0, 7.0, 7.0), 12.0)
    t = trim(x)
    assert t == Buckets((0.5, 1.0, 5.0, INF), (0.0, 3.0, 7.0, 7.0), 12.0)
    for q in (0.0, 0.3, 0.5, 0.9, 1.0):
        assert quantile(t, q) == pytest.approx(quantile(x, q))  # type: ignore[arg-type]
    assert (highest(t), lowest(t)) == (highest(x), lowest(x))
    other = Buckets(bounds, (1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0), 30.0)
    assert add([t, trim(other)]) == add([x, other])
    assert trim(Buckets((1.0, INF), (0.0, 2.0), 9.0)) == Buckets((1.0, INF), (0.0, 2.0), 9.0)
    assert trim(Buckets(bounds, (0.0,) * 7, 0.0)).bounds == bounds


@given(counts, st.floats(0.0, 1.0))
def test_trimming_never_changes_a_quantile(c: tuple[float, ...], q: float) -> None:
    x = h(*c)
    assert quantile(trim(x), q) == quantile(x, q)
