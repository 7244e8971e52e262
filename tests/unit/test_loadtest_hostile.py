"""The load test against endpoints that answer badly, over real HTTP on loopback: an answer over 16 MiB, a
streamed line over 1 MiB, JSON nested past Python's recursion limit, 200s that are not completions. Each is
counted as `bad_answer` in its level — bounded, never a traceback — and every level measured is kept (the
table, --save, --db); a level that fails for any other reason ends the run with the levels before it kept."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from agent.tools import loadtest
from agent.tools.loadtest import LoadTestOptions, run, synthetic_payload

COMPLETION = {"choices": [{"index": 0, "text": " hi"}], "usage": {"completion_tokens": 4}}


async def _big(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for _ in range(17):
        await response.write(b" " * (1 << 20))  # 17 MiB, no Content-Length
    return response


async def _long_line(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: " + b"x" * (1536 << 10) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def _nested(request: web.Request) -> web.Response:
    return web.Response(body=b"[" * 200_000 + b"]" * 200_000, content_type="application/json")


async def _nested_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\ndata: [DONE]\n\n")
    return response


async def _html(request: web.Request) -> web.Response:
    return web.Response(text="<html><body>It works!</body></html>", content_type="text/html")


async def _not_a_completion(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _ok(request: web.Request) -> web.Response:
    return web.json_response(COMPLETION)


ROUTES = {"big": _big, "long_line": _long_line, "nested": _nested, "nested_stream": _nested_stream, "html": _html,
          "not_a_completion": _not_a_completion, "ok": _ok}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    app = web.Application()
    for name, handler in ROUTES.items():
        app.router.add_post(f"/{name}/v1/completions", handler)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _options(url: str, **kw: object) -> LoadTestOptions:
    base: dict[str, object] = {"url": url, "payload": synthetic_payload(4, 4, False), "levels": (1, 2),
                               "requests_per_level": 2, "pause_seconds": 0.0, "metrics_url": "", "gpu": False,
                               "keep_going": True, "timeout_seconds": 30.0}
    base.update(kw)
    return LoadTestOptions(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("route", "stream"), [("big", False), ("long_line", True), ("nested", False),
                                               ("nested_stream", True), ("html", False),
                                               ("not_a_completion", False), ("not_a_completion", True)])
def test_a_bad_answer_is_counted_and_every_level_kept(endpoint: str, route: str, stream: bool) -> None:
    result = asyncio.run(run(_options(f"{endpoint}/{route}/v1/completions", stream=stream)))
    assert [s.level for s in result.steps] == [1, 2]
    assert all(s.errors == {"bad_answer": 2} and s.ok == 0 for s in result.steps), result.steps
    assert result.verdict.safe_level is None and result.verdict.cause == "answers that were not completions"
    assert result.failure is None


def test_a_good_answer_is_a_success(endpoint: str) -> None:
    result = asyncio.run(run(_options(f"{endpoint}/ok/v1/completions")))
    assert [(s.ok, s.errors) for s in result.steps] == [(2, {}), (2, {})]


def test_a_level_that_fails_keeps_the_levels_before_it(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = loadtest.run_level

    async def failing(*args: object, **kw: object) -> object:
        if args[5] == 2:
            raise RuntimeError("the sampler broke")
        return await real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loadtest, "run_level", failing)
    result = asyncio.run(run(_options(f"{endpoint}/ok/v1/completions", levels=(1, 2, 3))))
    assert [s.level for s in result.steps] == [1]
    assert result.failure == "level 2: RuntimeError: the sampler broke"


def test_the_cli_saves_and_stores_what_it_measured_and_says_what_went_wrong(endpoint: str, tmp_path: Path) -> None:
    save, db = tmp_path / "run.json", tmp_path / "agent.db"
    done = subprocess.run([sys.executable, "-m", "agent", "loadtest", f"{endpoint}/big/v1/completions",
                           "--levels", "1,2", "--requests-per-level", "2", "--pause", "0", "--metrics-url", "",
                           "--no-gpu", "--keep-going", "--save", str(save), "--db", str(db)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert "bad_answer" in done.stdout
    assert [s["level"] for s in json.loads(save.read_text())["steps"]] == [1, 2]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM load_steps").fetchone()[0] == 2


@pytest.mark.parametrize("args", [["--timeout", "inf"], ["--timeout", "nan"], ["--timeout", "1e300"],
                                  ["--pause", "inf"], ["--input-tokens", str(10**12)]])
def test_unbounded_options_are_refused_with_one_line(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "agent", "loadtest", "http://127.0.0.1:1/v1/completions",
                           *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
