"""The catalogue held against the parsers: every statement rendered behind every prefix, classified, compared.

    .venv/bin/python bench/catalogue.py [--write]

Each statement of parsers/catalogue/*.yaml is rendered with its arguments, put behind each prefix era of
its engine (the logger's own, process tags, ANSI colour), then inside each envelope a saved log can have
(plain, Docker json-file, CRI, `docker compose logs`, `kubectl logs --prefix --timestamps`, journald's
short format in several locales) and each way a pasted excerpt wears it (quoted, bulleted, numbered, in a
table, CRLF, a shipper's JSON record, cut at a terminal's width), and read by `scan`'s own path
(`agent.offline.saved.scan_into`) as the engine's stream. A statement is recognised when every rendering
gives exactly what the entry says: its event kind (and no other kind, bar `also`), its phase and fields; the
fact or load sample it carries; nothing at all for a benign one.

Without `--write` it prints the coverage report; with it, it rewrites docs/catalogue-coverage.md and the
supported-engines list of docs/parsers.md (tests/unit/test_catalogue.py holds both to the catalogue).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.offline.saved import scan_into
from agent.records import CapacityFact, Event, EventKind, Record, Server, ServerStats
from parsers.catalogue import NOT_INCIDENTS, Source, Statement, load, version_key
from parsers.paste import WRAP_WIDTHS

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "catalogue-coverage.md"
PARSERS_DOC = ROOT / "docs" / "parsers.md"
KINDS = frozenset(k.value for k in EventKind)
BEGIN, END = "<!-- catalogue:engines -->", "<!-- /catalogue:engines -->"
REF_TIME = 1765584000.0  # 2025-12-13: yearless stamps land in 2025

# journald's `short` format writes the month as the locale abbreviates it (strftime %b)
DECEMBER = {"en": "Dec", "de": "Dez", "fr": "déc.", "es": "dic", "ru": "дек", "zh": "12月"}
# journald's other output formats (`journalctl -o …`), and the runtimes' `--timestamps` without a pod prefix;
# each at 2025-12-14 03:11:15 UTC but short-monotonic, which counts seconds since boot
JOURNALD_FORMATS = {
    "short-iso": "2025-12-14T03:11:15+0000 gpu7 engine[1234]: ",
    "short-iso-precise": "2025-12-14T03:11:15.123456+0000 gpu7 engine[1234]: ",
    "short-precise": "Dec 14 03:11:15.123456 gpu7 engine[1234]: ",
    "short-unix": "1765681875.123456 gpu7 engine[1234]: ",
    "short-monotonic": "[ 1234.567890] gpu7 engine[1234]: ",
}
TIMESTAMPS = "2025-12-14T03:11:15.123456789Z "  # `docker logs --timestamps`, `kubectl logs --timestamps`
# the envelopes that carry a time of their own (a line's records must then have one)
STAMPED = frozenset({"docker", "cri", "kubectl", "timestamps", "loki", "shipper"}
                    | {f"journald-{k}" for k in DECEMBER}
                    | {f"journald-{k}" for k in JOURNALD_FORMATS if k != "short-monotonic"})


def envelopes(line: str) -> Iterator[tuple[str, str]]:
    """(name, physical line) for each way a saved log carries the line."""
    yield "plain", line
    yield "docker", json.dumps({"log": line + "\n", "stream": "stderr", "time": "2025-12-14T03:11:15.123456789Z"})
    yield "cri", f"2025-12-14T03:11:15.123456789Z stderr F {line}"
    yield "compose", f"engine-1  | {line}"  # `docker compose logs`
    yield "kubectl", f"[pod/engine-0/engine] 2025-12-14T03:11:15.123456789Z {line}"  # --prefix --timestamps
    yield "timestamps", f"{TIMESTAMPS}{line}"
    for locale, month in DECEMBER.items():
        yield f"journald-{locale}", f"{month} 14 03:11:15 gpu7 engine[1234]: {line}"
    for name, prefix in JOURNALD_FORMATS.items():
        yield f"journald-{name}", f"{prefix}{line}"
    yield from pasted(line)


def pasted(line: str) -> Iterator[tuple[str, str]]:
    """(name, line) for each way a person pastes the line into a thread (quoted, bulleted, numbered, in a
    table, with Windows line ends) and a log shipper forwards it (a JSON record with the text in one field)."""
    yield "quote", f"> {line}"
    yield "quote-nested", f">> {line}"
    yield "quote-bullet", f"> - {line}"
    yield "bullet", f"- {line}"
    yield "gutter", f"  12 | {line}"
    yield "gutter-colon", f"12: {line}"
    yield "table", "| " + line.rstrip("\n").replace("|", "\\|") + " |"  # a cell holds one line
    yield "crlf", line + "\r"
    yield "loki", json.dumps({"line": line, "timestamp": "2025-12-14T03:11:15.123456789Z"})
    yield "shipper", json.dumps({"level": "info", "time": "2025-12-14T03:11:15Z", "msg": line})
    for width in WRAP_WIDTHS:  # copied out of a terminal that cut it at its width
        if len(line) > width and "\n" not in line:
            yield f"wrapped-{width}", "\n".join(line[i:i + width] for i in range(0, len(line), width))


def rendered(source: Source, statement: Statement) -> Iterator[tuple[str, str, bool]]:
    """(label, physical line, whether it carries a time) for every prefix era and envelope of the statement."""
    message = statement.message()
    prefixes = source.prefixes_for(statement) or ()
    templates = [(p.name, p.template, p.timed) for p in prefixes] or [("bare", "{msg}", False)]
    for name, template, timed in templates:
        line = (template.replace("{level}", statement.level).replace("{msg}", message)
                .replace("{json_msg}", json.dumps(message)[1:-1]))
        for envelope, physical in envelopes(line):
            yield f"{name}/{envelope}", physical, timed or envelope in STAMPED


def lines_of(source: Source, statement: Statement) -> Iterator[tuple[str, str]]:
    """(label, physical line) for every prefix era and envelope the statement is printed in."""
    for label, physical, _timed in rendered(source, statement):
        yield label, physical


def classify(physical: str, server: Server) -> list[Record]:
    out: list[Record] = []
    scan_into(io.BytesIO(physical.encode() + b"\n"), "catalogue.log", lambda rs, _s: out.extend(rs), server,
              REF_TIME)
    return out


def same(got: object, want: object) -> bool:
    """Equal, floats within rounding (a percentage over 100 is not exactly its ratio)."""
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    return got == want


def _field(record: Record, name: str) -> object:
    if isinstance(record, Event):
        return record.fields.get(name)
    return getattr(record, name, None)


def problems(statement: Statement, records: list[Record], timed: bool = True) -> list[str]:
    """What the records get wrong against the entry (empty: classified as it says); `timed`: the line
    carries a time, which its records must have."""
    events = [r for r in records if isinstance(r, Event)]
    untimed = [f"{type(r).__name__} without a time" for r in records
               if timed and isinstance(r, (Event, ServerStats)) and r.ts is None][:1]
    kinds = {e.kind.value for e in events}
    if statement.signals == "benign":
        return [f"a false alarm: {sorted(kinds)}"] if events else []
    if untimed:
        return untimed
    if statement.signals == "fact":
        facts = {r.name: r.value for r in records if isinstance(r, CapacityFact)}
        return [f"fact {k}={facts.get(k)!r}, expected {v!r}" for k, v in statement.fields.items()
                if not same(facts.get(k), v)]
    if statement.signals == "stats":
        stats = [r for r in records if isinstance(r, ServerStats)]
        if not stats:
            return ["no load sample"]
        return [f"{k}={_field(stats[0], k)!r}, expected {v!r}" for k, v in statement.fields.items()
                if not same(_field(stats[0], k), v)]
    if statement.signals not in KINDS:  # a kind this build does not have yet: the line must raise nothing
        return [f"{statement.signals} is not a kind of this build", *([f"also classified as {sorted(kinds)}"]
                                                                     if kinds else [])]
    wrong = kinds - {statement.signals, *statement.also}
    out = [f"also classified as {sorted(wrong)}"] if wrong else []
    hits = [e for e in events if e.kind.value == statement.signals]
    if not hits:
        return [*out, f"no {statement.signals} event"]
    event = hits[0]
    if statement.phase is not None and event.phase.value != statement.phase:
        out.append(f"phase {event.phase.value}, expected {statement.phase}")
    out += [f"{k}={event.fields.get(k)!r}, expected {v!r}" for k, v in statement.fields.items()
            if not same(event.fields.get(k), v)]
    return out


@dataclass(frozen=True)
class Outcome:
    source: Source
    statement: Statement
    failures: tuple[str, ...]  # "label: problem" for each rendering that went wrong
    auto: bool = False  # every plain rendering also classified as the entry says with the server unknown

    @property
    def recognised(self) -> bool:
        return not self.failures


def check(source: Source, statement: Statement) -> Outcome:
    failures = []
    auto = True
    for label, physical, timed in rendered(source, statement):
        failures += [f"{label}: {p}" for p in problems(statement, classify(physical, source.parser), timed)]
        if label.endswith("/plain"):
            auto = auto and not problems(statement, classify(physical, Server.AUTO), False)
    return Outcome(source, statement, tuple(failures), auto and not failures)


def outcomes() -> list[Outcome]:
    return [check(source, s) for source in load() for s in source.statements]


def _range(s: Statement) -> str:
    return f"{s.since} → {s.until}" if s.until else f"{s.since} →"


def report(results: list[Outcome]) -> str:
    """docs/catalogue-coverage.md: per engine version, its incident statements recognised, and those not."""
    out = ["# Catalogue coverage", "",
           "Generated by `.venv/bin/python bench/catalogue.py --write` from parsers/catalogue/*.yaml: for each",
           "engine, client and proxy, and each version read, how many of the incident statements it prints the",
           "parsers recognise (every rendering classified as the entry says), and the ones they do not, with why.",
           "\"With the server unknown\": the line alone also classifies so under `scan`'s default `--server auto`",
           "(an excerpt too short to tell its engine). Benign near misses must stay silent and are counted apart.",
           "Do not edit by hand.", "",
           "## Size", "",
           "Statements catalogued per engine, client and proxy (incident / fact or load sample / benign near miss):",
           "", *_size_rows(), ""]
    for source in load():
        mine = [r for r in results if r.source is source]
        out += [f"## {source.engine} ({source.role})", "",
                "| version | incident statements | recognised | … with the server unknown "
                "| benign near misses kept silent |",
                "|---|---|---|---|---|"]
        for v in sorted(source.versions, key=version_key):
            here = [r for r in mine if r.statement.covers(v)]
            inc = [r for r in here if r.statement.incident]
            ben = [r for r in here if r.statement.signals == "benign"]
            out.append(f"| {v} | {len(inc)} | {sum(r.recognised for r in inc)} | {sum(r.auto for r in inc)} | "
                       f"{sum(r.recognised for r in ben)} of {len(ben)} |")
        out.append("")
        for title, wanted in (("Not recognised", lambda s: s.signals not in ("fact", "stats")),
                              ("Facts and samples not read", lambda s: s.signals in ("fact", "stats"))):
            missed = [r for r in mine if not r.recognised and wanted(r.statement)]
            if missed:
                out += [f"{title}:", ""]
                for r in missed:
                    why = r.statement.gap or "; ".join(r.failures[:2])
                    out.append(f"- `{r.statement.id}` ({_range(r.statement)}, {r.statement.signals}): {why}")
                out.append("")
    return "\n".join(out)


def _counts(source: Source) -> tuple[int, int, int, int]:
    st = source.statements
    return (len(st), sum(s.incident for s in st), sum(s.signals in ("fact", "stats") for s in st),
            sum(s.signals == "benign" for s in st))


def _size_rows() -> list[str]:
    rows = ["| source | role | statements | incident | fact, stats | benign |", "|---|---|---|---|---|---|"]
    totals = [0, 0, 0, 0]
    for source in load():
        counts = _counts(source)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        rows.append(f"| {source.engine} | {source.role} | " + " | ".join(map(str, counts)) + " |")
    return [*rows, "| all | | " + " | ".join(map(str, totals)) + " |"]


def engines_list() -> str:
    """The supported-engines block of docs/parsers.md."""
    rows = ["| source | role | versions read | statements (incident / fact, stats / benign) |", "|---|---|---|---|"]
    for source in load():
        total, inc, facts, benign = _counts(source)
        rows.append(f"| {source.engine} | {source.role} | {', '.join(sorted(source.versions, key=version_key))} | "
                    f"{total} ({inc} / {facts} / {benign}) |")
    return "\n".join([BEGIN, *rows, END])


def parsers_doc(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + engines_list() + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/catalogue-coverage.md and docs/parsers.md")
    ap.add_argument("--show", action="store_true", help="print every failing rendering")
    args = ap.parse_args(argv)
    results = outcomes()
    if args.show:
        for r in results:
            seen: dict[str, list[str]] = {}
            for f in r.failures:
                label, _, problem = f.partition(": ")
                seen.setdefault(problem, []).append(label)
            for problem, labels in seen.items():
                print(f"{r.statement.key}: {problem}  [{len(labels)}: {', '.join(labels[:3])}]")
    text = report(results)
    if args.write:
        REPORT.write_text(text + "\n", encoding="utf-8")
        PARSERS_DOC.write_text(parsers_doc(PARSERS_DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(text)
    total = sum(1 for r in results if r.statement.signals not in NOT_INCIDENTS)
    print(f"{sum(r.recognised for r in results)} of {len(results)} statements as catalogued "
          f"({total} incident statements)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
