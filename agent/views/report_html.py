"""`report --format html`: one self-contained page (opens on an air-gapped node) with uPlot charts.

uPlot (MIT, vendored minified under views/vendor/uplot with its licence, about 53 KB with its CSS) draws
on canvas: GPU memory and KV usage over time with the capacity lines and event markers, running/waiting
against the capacity, and events per minute by kind. All text goes through Jinja2's autoescape; the
chart data is embedded as JSON in a `<script type="application/json">` with `<`, `>` and `&` written as
`\\u003c`, `\\u003e`, `\\u0026`, so no string in it can close the script element.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jinja2

from agent.offline.report import MAX_POINTS, Report
from agent.views.report_sections import header_lines, sections

UPLOT_VERSION = "1.6.32"
CHARTS = (("memory", "GPU memory used (bucket max, min dashed; red: card total and the engine's memory fraction)",
           "GiB", True, False),
          ("kv", "KV-cache usage per engine (bucket max, min dashed; red: full)", "%", True, False),
          ("load", "Running and waiting requests (red: capacity, configured max_num_seqs)", "requests", False, False),
          ("events", "Events per {bucket} by kind", "events", False, True))


def _asset(*parts: str) -> str:
    return resources.files("agent.views").joinpath(*parts).read_text(encoding="utf-8")


def safe_json(value: Any) -> str:
    """JSON that is inert inside an HTML <script> element (no `</script>`, `<!--` or `]]>` can form)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _hlines(report: Report, key: str) -> list[dict[str, Any]]:
    if key == "memory":
        fractions = [c.configured.get("gpu_memory_fraction") for c in report.capacity]
        fraction = next((f for f in fractions if isinstance(f, int | float)), None)
        lines = [{"value": g.total_bytes, "label": f"GPU {g.gpu} total"} for g in report.gpus if g.total_bytes]
        if fraction is not None:  # the engine's share of the card: what it pre-allocates up to
            lines += [{"value": fraction * g.total_bytes, "label": f"GPU {g.gpu} × {fraction:g} (engine budget)"}
                      for g in report.gpus if g.total_bytes]
        return lines
    if key == "kv":
        return [{"value": 1.0, "label": "KV cache full"}] if report.engines else []
    if key == "load":
        out: list[dict[str, Any]] = []
        for c in report.capacity:
            if c.max_concurrency is not None:
                out.append({"value": c.max_concurrency, "label": f"{c.engine} capacity {c.max_concurrency}"})
            seqs = c.configured.get("max_num_seqs")
            if isinstance(seqs, int | float) and seqs != c.max_concurrency:
                out.append({"value": seqs, "label": f"{c.engine} max_num_seqs {seqs:g}"})
        return out
    return []


def render_html(report: Report) -> str:
    """The report as one HTML page with its charts' library and data inline."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("agent.views", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=False)
    minutes = report.charts["events"].bucket_seconds / 60
    bucket = "minute" if minutes == 1 else f"{minutes:.0f} minutes"
    specs: list[dict[str, Any]] = [
        {"key": key, "title": title.format(bucket=bucket), "unit": unit, "pairs": pairs, "stepped": stepped,
         "digits": 1, "hlines": _hlines(report, key)} for key, title, unit, pairs, stepped in CHARTS]
    data = {"charts": {key: {"x": c.x, "series": c.series} for key, c in report.charts.items()},
            "markers": [{"ts": m["ts"], "kind": m["kind"]} for m in report.markers], "specs": specs}
    charts = [{"key": s["key"], "title": s["title"], "has_data": bool(report.charts[s["key"]].series),
               "empty": "No events in the window." if s["key"] == "events" else "No samples in the window."}
              for s in specs]
    return env.get_template("report.html.j2").render(
        verdict=report.verdict, header=header_lines(report), sections=sections(report), charts=charts,
        data_json=safe_json(data), uplot_js=_asset("vendor", "uplot", "uPlot.iife.min.js"),
        uplot_css=_asset("vendor", "uplot", "uPlot.min.css"), draw_js=_asset("templates", "report_charts.js"),
        uplot_version=UPLOT_VERSION, max_points=MAX_POINTS)
