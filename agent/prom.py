"""Prometheus text exposition, read: what the scraper makes of an engine's /metrics and `status` of ours.

Kept apart from the exporter (which writes exposition) so that reading a page never drags the serving
side in. prometheus_client's own parser does the reading: it knows the format's corners (escapes,
exemplars, `# EOF`) better than a hand-written one would.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def exposition_samples(text: str) -> Samples:
    """Metric name → (labels, value) of every sample of a text exposition (an engine's /metrics);
    raises ValueError on garbage.

    Names lose a `_total` suffix so a counter reads the same whether the engine's exporter appends it
    (prometheus_client) or not (TGI's Rust exporter); `_created` samples and values that are not
    finite (NaN, ±Inf) are dropped.
    """
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created") or not math.isfinite(sample.value):
                continue
            if name.endswith("_total"):
                name = name[:-6]
            out.setdefault(name, []).append((dict(sample.labels), float(sample.value)))
    return out
