"""`report --format md`: GitHub-flavoured Markdown that pastes cleanly into an issue tracker.

Log text is escaped for Markdown (a pipe cannot end a cell, `<tag>` cannot become HTML, `*`/`_` cannot
start emphasis; every cell is inline, so line-start markers need no escape) and folded onto one line per cell.
"""

from __future__ import annotations

import re

from agent.offline.report import Report
from agent.views.report_sections import header_lines, sections

_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: str) -> str:
    """Text safe inside a GFM table cell or paragraph: one line, punctuation escaped, `<`/`&` as entities."""
    flat = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", flat)


def render_md(report: Report) -> str:
    out = ["## deepinfer-agent report", "", f"**{md_escape(report.verdict.headline)}**", ""]
    out += [f"- {md_escape(line)}" for line in header_lines(report)]
    for section in sections(report):
        out += ["", f"### {md_escape(section.title)}", ""]
        if not section.rows:
            out.append(md_escape(section.empty))
            continue
        out.append("| " + " | ".join(md_escape(h) for h in section.headers) + " |")
        out.append("|" + "|".join("---" for _ in section.headers) + "|")
        out += ["| " + " | ".join(md_escape(cell) for cell in row) + " |" for row in section.rows]
        if section.footer:
            out += ["", md_escape(section.footer)]
    return "\n".join(out) + "\n"
