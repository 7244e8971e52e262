"""The load test's own ceiling: requests/s against a trivially fast endpoint, next to `hey` on the same one.

Run by hand: `.venv/bin/python bench/loadtest_ceiling.py [--requests 5000] [--concurrency 16]`. A small
aiohttp server in a child process answers every POST at once with a fixed completion; the load test
(one level, no scraping, no pause) and then `hey` (if installed) send the same number of requests with
the same concurrency. Prints both rates and their ratio. Loopback only, bounded request counts.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SERVER = '''
import json, sys
from aiohttp import web
BODY = json.dumps({"id": "x", "object": "text_completion",
                   "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
async def handle(request):
    await request.read()
    return web.Response(body=BODY, content_type="application/json")
async def models(request):
    return web.json_response({"data": [{"id": "trivial"}]})
app = web.Application()
app.router.add_post("/v1/completions", handle)
app.router.add_get("/v1/models", models)
async def ready(app):
    print("ready", flush=True)
app.on_startup.append(ready)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
'''


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    from agent.tools.loadtest import LoadTestOptions, run

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/completions"
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        payload = {"model": "trivial", "prompt": "hello", "max_tokens": 1}
        options = LoadTestOptions(url=url, payload=payload, levels=(args.concurrency,),
                                  requests_per_level=args.requests, pause_seconds=0.0, metrics_url="", gpu=False)
        ours = asyncio.run(run(options)).steps[0]
        print(f"deepinfer-agent loadtest: {ours.throughput_rps:,.0f} req/s ({ours.ok}/{ours.requests} ok, "
              f"c={args.concurrency}, p50 {ours.latency_p50_seconds * 1000:.2f} ms)")
        if shutil.which("hey") is None:
            print("hey: not installed (apt-get install hey)")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            body = Path(tmp) / "payload.json"
            body.write_text('{"model": "trivial", "prompt": "hello", "max_tokens": 1}')
            out = subprocess.run(["hey", "-n", str(args.requests), "-c", str(args.concurrency), "-m", "POST",
                                  "-T", "application/json", "-D", str(body), url],
                                 capture_output=True, text=True, check=True).stdout
        match = re.search(r"Requests/sec:\s+([\d.]+)", out)
        hey = float(match.group(1)) if match else float("nan")
        print(f"hey:                      {hey:,.0f} req/s (same endpoint, -n {args.requests} -c {args.concurrency})")
        print(f"ratio (ours / hey):       {ours.throughput_rps / hey:.2f}")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
