"""`report --format text`: the report for a terminal, laid out with rich (tables, the verdict in colour)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.offline.report import Report
from agent.views.report_sections import header_lines, sections

_STYLE = {"critical": "bold red", "warning": "bold yellow", "ok": "bold green", "none": "bold"}


def render_text(report: Report, *, color: bool = False, width: int = 120) -> str:
    """The whole report as terminal text; log text is printed literally (never read as rich markup)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=width, highlight=False,
                      soft_wrap=False)
    console.print(escape(report.verdict.headline), style=_STYLE.get(report.verdict.severity, "bold"))
    for line in header_lines(report):
        console.print(escape(line))
    for section in sections(report):
        console.print()
        if not section.rows:
            console.print(f"[bold]{escape(section.title)}[/bold]: {escape(section.empty)}")
            continue
        table = Table(title=section.title, title_justify="left", title_style="bold", show_lines=False)
        for header in section.headers:
            table.add_column(header, overflow="fold")
        for row in section.rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
        if section.footer:
            console.print(escape(section.footer))
    return buffer.getvalue()
