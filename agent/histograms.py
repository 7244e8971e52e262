"""Prometheus histograms as the agent reads them: the window between two scrapes, merged windows, quantiles.

An engine's latency and length histograms (`vllm:e2e_request_latency_seconds`, `sglang:queue_time_seconds`,
`tgi_request_duration`, …) are cumulative since the engine started. What the rules need is the
distribution of the requests that finished *in a window*, so the scraper keeps each scrape's cumulative
buckets and stores the difference (`delta`): a bucket that went down, or a restarted engine, means the
counts started again from 0, and the new counts are the window. The judge adds windows up (`merge`) and
reads quantiles from the buckets (`quantile`), the way Prometheus' `histogram_quantile` does: linear
interpolation inside the bucket that holds the rank, from the bucket's lower bound (0 for the first
bucket) to its upper bound; a rank in the `+Inf` bucket answers the highest finite bound (a floor, not
the true value). docs/rules.md states the same.

Pure functions over tuples: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True)
class Buckets:
    """Cumulative counts at ascending upper bounds (the last bound is +Inf), and the sum of the observations."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = 0.0

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    def at(self, bound: float) -> float:
        """The cumulative count at `bound`: exact at one of the bounds, else the count at the nearest bound
        below (a lower estimate, which keeps the merged counts non-decreasing)."""
        i = bisect.bisect_right(self.bounds, bound) - 1
        return self.counts[i] if i >= 0 else 0.0


def from_series(series: Iterable[tuple[str, float]], total: float) -> Buckets | None:
    """Buckets from `(le label, cumulative count)` pairs of one histogram series and its `_sum`; None when
    no bucket parses. A missing `+Inf` bucket is taken as the largest count (the format requires it); a
    count below the one before it is raised to it."""
    pairs: dict[float, float] = {}
    for le, value in series:
        try:
            bound = float(le)  # float() reads "+Inf" as inf
        except ValueError:
            continue
        if not math.isnan(bound):
            pairs[bound] = value
    if not pairs:
        return None
    if INF not in pairs:
        pairs[INF] = max(pairs.values())
    bounds = tuple(sorted(pairs))
    counts: list[float] = []
    for b in bounds:  # cumulative counts never go down, nor below 0: garbage is not read as a distribution
        counts.append(max(pairs[b], counts[-1] if counts else 0.0))
    return Buckets(bounds, tuple(counts), max(total, 0.0))


def trim(h: Buckets) -> Buckets:
    """The same distribution on fewer bounds: below the first bucket that holds observations only its lower
    bound is kept (with count 0), above the bucket that reaches the total only +Inf. Lossless for
    `quantile`, `highest`, `lowest` and `add` (a bound dropped below counts 0, one above the total), and a
    window of a few requests keeps a few bounds of the engine's twenty or thirty."""
    total = h.count
    if total <= 0 or len(h.bounds) <= 2:
        return h
    first = next(i for i, c in enumerate(h.counts) if c > 0)
    last = next(i for i, c in enumerate(h.counts) if c >= total)
    keep = list(range(max(first - 1, 0), last + 1))
    if keep[-1] != len(h.bounds) - 1:
        keep.append(len(h.bounds) - 1)
    return Buckets(tuple(h.bounds[i] for i in keep), tuple(h.counts[i] for i in keep), h.sum)


def delta(before: Buckets | None, now: Buckets, restarted: bool = False) -> Buckets:
    """The observations between two cumulative readings of one series. Without a reading before (a series
    that appeared since), or after a restart, or when any count went down (a reset the process start time
    did not show), or when the bounds changed (only a restarted engine can change them), `now` is the
    window itself."""
    if before is None or restarted or before.bounds != now.bounds:
        return now
    counts = tuple(c - b for c, b in zip(now.counts, before.counts, strict=True))
    if any(c < 0 for c in counts):
        return now
    return Buckets(now.bounds, counts, max(now.sum - before.sum, 0.0))


def add(parts: Sequence[Buckets]) -> Buckets | None:
    """Several histograms as one (the series of data-parallel engines, or the windows of a rule): counts
    summed at the union of their bounds; a part without a bound counts at its nearest bound below."""
    parts = [p for p in parts if p.counts]
    if not parts:
        return None
    if all(p.bounds == parts[0].bounds for p in parts):
        counts = tuple(map(sum, zip(*(p.counts for p in parts), strict=True)))
        return Buckets(parts[0].bounds, counts, sum(p.sum for p in parts))
    bounds = tuple(sorted({b for p in parts for b in p.bounds}))
    return Buckets(bounds, tuple(sum(p.at(b) for p in parts) for b in bounds), sum(p.sum for p in parts))


def quantile(h: Buckets, q: float) -> float | None:
    """The `q` quantile (0–1), interpolated linearly inside its bucket (Prometheus' histogram_quantile);
    None without observations. A rank in the +Inf bucket answers the highest finite bound."""
    total = h.count
    if total <= 0:
        return None
    rank = q * total
    i = next(i for i, c in enumerate(h.counts) if c >= rank and c > 0)
    upper = h.bounds[i]
    if math.isinf(upper):
        finite = [b for b in h.bounds if math.isfinite(b)]
        return finite[-1] if finite else None
    lower, below = (h.bounds[i - 1], h.counts[i - 1]) if i > 0 else (min(0.0, upper), 0.0)
    inside = h.counts[i] - below
    if inside <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / inside


def highest(h: Buckets) -> float | None:
    """The upper bound of the highest bucket that holds observations (an upper bound of the maximum; the
    highest finite bound when that bucket is +Inf)."""
    if h.count <= 0:
        return None
    i = next(i for i, c in enumerate(h.counts) if c >= h.count)
    if math.isinf(h.bounds[i]):
        finite = [b for b in h.bounds if math.isfinite(b)]
        return finite[-1] if finite else None
    return h.bounds[i]


def lowest(h: Buckets) -> float | None:
    """The lower bound of the lowest bucket that holds observations (a lower bound of the minimum)."""
    if h.count <= 0:
        return None
    i = next(i for i, c in enumerate(h.counts) if c > 0)
    return h.bounds[i - 1] if i > 0 else min(0.0, h.bounds[0])
