"""The page at `/` of the metrics server: what a person opening the port in a browser wants first."""

from __future__ import annotations

from html import escape

from agent.sinks.snapshot import Snapshot, engines_of, source_of


def landing(snap: Snapshot) -> bytes:
    """The page at `/` (as mtail's): each source, whether it reads, the lines it delivered and how far it
    is behind, then the engines it feeds; a link to /metrics. Every name is escaped (paths are the
    operator's, but a file name is anyone's)."""
    lines = {labels[0]: v for (name, labels), v in snap.totals.items() if name == "source_lines_total" and labels}
    engines = engines_of(snap)
    rows = []
    for s in snap.sources:
        fed = sorted(e for e in engines if source_of(e, [x.source for x in snap.sources]) == s.source)
        state = "up" if s.up else f"down: {s.down_reason or 'cannot read'}"
        rows.append(f"<tr><td>{escape(s.source)}</td><td>{escape(state)}</td><td>{int(lines.get(s.source, 0)):,}</td>"
                    f"<td>{s.lag_bytes:,}</td><td>{s.files}</td><td>{escape(', '.join(fed))}</td></tr>")
    table = ("<table><tr><th>source</th><th>state</th><th>lines read</th><th>lag (bytes)</th><th>open files</th>"
             f"<th>engines</th></tr>{''.join(rows)}</table>" if rows else "<p>No log sources configured.</p>")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>deepinfer-agent</title></head><body>"
            f"<h1>deepinfer-agent {escape(snap.version)}</h1>{table}"
            f"<p>Prometheus metrics: <a href=\"/metrics\">/metrics</a></p></body></html>\n").encode()
