"""Load test of orthrus-rag-serve: many concurrent mixed embedding and chat requests, all of which must succeed.

Starts the server on a free loopback port (the shipped models unless told otherwise), sends every request at
once, and prints requests/s and latency percentiles per endpoint. Exits non-zero when any request failed. The
requests all come from one address, so the server it starts admits that many at once from one client
(`server.max_concurrent_per_key`, `server.max_connections`); a server given with --url keeps its own limits and
answers 429 past them.

    python eval/load/http_load.py --requests 500 --max-tokens 16
    python eval/load/http_load.py --model /models/Qwen3-0.6B --override runtime.dtype=float32
    python eval/load/http_load.py --url http://127.0.0.1:8000   # an already running server
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["rivers", "mountains", "old bridges", "harbours", "libraries", "winter fairs", "railways", "lighthouses"]


@dataclass
class Result:
    endpoint: str
    seconds: float
    error: str | None = None


@contextlib.contextmanager
def started_server(args: argparse.Namespace):
    """Run orthrus-rag-serve in a child process and yield its base URL; stop it (SIGINT, graceful) afterwards."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "orthrus_rag.serving.cli", f"model.name={args.model}",
               f"embedder.name={args.embedder}", "server.host=127.0.0.1", f"server.port={port}",
               "server.rag.enabled=false", "server.log_level=warning", f"server.max_concurrent_per_key={args.requests}",
               f"server.max_connections={args.requests + 8}", *args.override]
    print("starting:", " ".join(command[1:]), flush=True)
    child = subprocess.Popen(command, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, child, args.startup_timeout)
        yield url
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()


def wait_healthy(url: str, child: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"the server exited with code {child.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"the server was not healthy after {timeout:.0f} s")


def request_body(i: int, is_embed: bool, model: str, max_tokens: int) -> tuple[str, dict]:
    topic = TOPICS[i % len(TOPICS)]
    if is_embed:
        return "/v1/embeddings", {"input": f"Passage {i}: a short note about {topic} in a small town."}
    messages = [{"role": "user", "content": f"In one sentence, tell me something about {topic} (#{i})."}]
    return "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": max_tokens,
                                    "temperature": 0}


async def one(client: httpx.AsyncClient, endpoint: str, body: dict) -> Result:
    start = time.perf_counter()
    try:
        resp = await client.post(endpoint, json=body)
        error = None if resp.status_code == 200 else f"HTTP {resp.status_code}: {resp.text[:200]}"
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err}"
    return Result(endpoint, time.perf_counter() - start, error)


async def run_load(url: str, args: argparse.Namespace) -> tuple[list[Result], float]:
    """Every request sent at once; their results, and the wall time until the last answer."""
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout, limits=httpx.Limits(max_connections=None)) \
            as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        n_embed = round(args.requests * args.embed_fraction)
        kinds = np.random.default_rng(0).permutation([True] * n_embed + [False] * (args.requests - n_embed))
        bodies = [request_body(i, bool(k), model, args.max_tokens) for i, k in enumerate(kinds)]
        start = time.perf_counter()
        results = await asyncio.gather(*(one(client, endpoint, body) for endpoint, body in bodies))
        return list(results), time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=500, help="requests in total, all sent at once")
    p.add_argument("--embed-fraction", type=float, default=0.5, help="share of embedding requests (rest: chat)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens of each chat request")
    p.add_argument("--model", default="smollm2-135m-instruct", help="generator: shipped name or local folder")
    p.add_argument("--embedder", default="all-minilm-l6-v2", help="embedder: shipped name or local folder")
    p.add_argument("--override", action="append", default=[], help="extra Hydra override for the server")
    p.add_argument("--url", default=None, help="test this running server instead of starting one")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for the server")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one request may take")
    args = p.parse_args()
    with (contextlib.nullcontext(args.url) if args.url else started_server(args)) as url:
        results, wall_s = asyncio.run(run_load(url, args))
    failed = [r for r in results if r.error]
    print(f"\n{len(results)} requests in {wall_s:.1f} s: {len(results) / wall_s:.1f} requests/s, {len(failed)} errors")
    print(f"{'endpoint':<22}{'n':>6}{'errors':>8}{'req/s':>9}{'p50 s':>9}{'p99 s':>9}")
    for endpoint in sorted({r.endpoint for r in results}):
        rows = [r for r in results if r.endpoint == endpoint]
        latency = np.array([r.seconds for r in rows])
        errors = sum(1 for r in rows if r.error)
        print(f"{endpoint:<22}{len(rows):>6}{errors:>8}{len(rows) / wall_s:>9.1f}"
              f"{np.percentile(latency, 50):>9.2f}{np.percentile(latency, 99):>9.2f}")
    for r in failed[:5]:
        print("error:", r.endpoint, r.error)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
