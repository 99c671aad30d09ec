"""The web page in a real browser: Debian's chromium driven by Playwright, against `orthrus-rag-serve` on the demo
set with the shipped models (one server for the module), and a key-protected server on the tiny models."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from orthrus_rag.engine import QueueFullError
from orthrus_rag.rag import Answer
from orthrus_rag.serving import ServerSettings
from tests.serving.conftest import API_KEY, fake_rag

pytestmark = pytest.mark.shipped
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
if CHROMIUM is None and os.environ.get("ORTHRUS_TEST_REQUIRE_OPTIONAL") != "1":  # CI sets it: then these fail
    pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)", allow_module_level=True)
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def shipped_url(tmp_path_factory):
    """orthrus-rag-serve on the demo set, the shipped models, one request in flight per client."""
    port = free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "orthrus_rag.serving.cli", f"server.port={port}",
                               "server.max_concurrent_per_key=1", "server.log_level=warning"],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"orthrus-rag-serve exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("orthrus-rag-serve did not become healthy")


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    page.set_default_timeout(120_000)
    yield page
    context.close()


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#example option[value='demo:demo-q01']", state="attached")


def newest_step(page) -> int:
    return page.evaluate("Math.max(0, ...[...document.querySelectorAll('.steps-chart rect')]"
                         ".map(r => +r.dataset.step))")


def test_the_page_loads_without_console_errors(page, shipped_url):
    open_page(page, shipped_url)
    assert page.input_value("#pipeline") == "standard_rag"  # the server's configured pipeline
    assert {"ircot", "standard_rag"} <= set(page.eval_on_selector_all("#pipeline option", "o => o.map(x => x.value)"))
    assert page.is_hidden("#message") and page.is_hidden("#key-form")
    assert page.console_errors == []


def test_a_demo_question_streams_its_trace_and_shows_its_gold_and_the_engine_moves(page, shipped_url):
    open_page(page, shipped_url)
    page.select_option("#example", "demo:demo-q01")
    page.select_option("#pipeline", "ircot")
    page.fill("#max-steps", "2")
    page.click("#ask-button")
    page.wait_for_selector(".call.retrieve .passage .title")
    page.wait_for_function("[...document.querySelectorAll('pre.text.streaming')].some(e => e.textContent.trim())")
    page.click("button[data-tab=engine]")
    page.wait_for_selector(".steps-chart rect", state="attached")
    seen = newest_step(page)
    page.wait_for_function(f"Math.max(...[...document.querySelectorAll('.steps-chart rect')]"
                           f".map(r => +r.dataset.step)) > {seen}")
    page.click("button[data-tab=ask]")
    page.wait_for_selector(".answer-text")
    assert page.text_content(".gold-answer") == "Vostrick"
    assert page.locator(".gold-titles li").count() == 2
    assert page.locator(".call.reason pre.text").first.text_content().strip()
    assert page.locator(".tl-row").count() == page.locator(".call").count()
    assert page.console_errors == []


def test_an_empty_question_and_a_busy_server_show_messages_and_the_page_goes_on(page, shipped_url):
    open_page(page, shipped_url)
    page.fill("#question", "   ")
    page.click("#ask-button")
    assert "Type a question" in page.text_content("#message")
    page.click("button[data-tab=compare]")
    page.fill("#compare-question", "Where was the founder of Kestrel Works born?")
    page.select_option("#compare-left", "standard_rag")
    page.select_option("#compare-right", "standard_rag")
    page.click("#compare-button")  # two questions at once, one allowed per client: one is refused with 429
    page.wait_for_function("document.getElementById('message').textContent.includes('busy')")
    page.wait_for_selector("#compare-button:not([disabled])")
    assert page.locator(".answer-text").count() == 1
    page.click("#compare-button")  # the page still works: nothing is left in flight, so one answers again
    page.wait_for_selector("#compare-button:not([disabled])")
    assert page.locator(".answer-text").count() == 1


def test_the_page_asks_for_the_api_key_once_and_keeps_it_in_the_tab(page, serve_app, engine):
    with serve_app(engine, ServerSettings(api_key=API_KEY, ui={"public": True}), rag=fake_rag) as running:
        page.goto(running.url)
        page.wait_for_selector("#key-form:not([hidden])")
        assert "API key" in page.text_content("#message")
        page.fill("#key-input", API_KEY)
        page.click("#key-form button")
        page.wait_for_selector("#pipeline option", state="attached")
        page.wait_for_selector("#message", state="hidden", timeout=10_000)  # hidden once the page has loaded
        assert page.is_hidden("#key-form")
        assert page.evaluate("sessionStorage.getItem('orthrus-api-key')") == API_KEY
        page.reload()
        page.wait_for_selector("#pipeline option", state="attached")
        assert page.is_hidden("#key-form")


async def slow_rag(question: str, pipeline: str | None) -> Answer:
    await asyncio.sleep(30)
    return Answer(question, "too late")


def test_a_deadline_and_a_lost_server_show_messages(page, serve_app, engine):
    with serve_app(engine, ServerSettings(request_timeout_s=1.0), rag=slow_rag) as running:
        open_page(page, running.url)
        page.fill("#question", "Which river?")
        page.click("#ask-button")
        page.wait_for_function("document.getElementById('message').textContent.includes('longer than the server')")
        assert page.is_enabled("#ask-button")
    page.click("#ask-button")  # the server is gone now
    page.wait_for_function("document.getElementById('message').textContent.includes('Lost the connection')")
    assert page.is_enabled("#ask-button")


async def full_queue_rag(question: str, pipeline: str | None) -> Answer:
    raise QueueFullError("the waiting queue is full (1 requests); retry later")


def test_a_full_engine_queue_inside_the_stream_says_the_server_is_busy(page, serve_app, engine):
    with serve_app(engine, ServerSettings(), rag=full_queue_rag) as running:
        open_page(page, running.url)
        page.fill("#question", "Which river?")
        page.click("#ask-button")
        page.wait_for_selector("#ask-result .error")
        assert "server is busy" in page.text_content("#message")
        assert page.is_enabled("#ask-button")


def step_record(step_id: int) -> dict:
    return {"id": step_id, "time": 0.0, "step_s": 0.01, "generator_s": 0.01, "embedder_s": 0.0,
            "tokens": {"decode": 1, "prefill": 0, "embed": 0}, "embedder_tokens": 0, "running": 1, "waiting": {},
            "kv_blocks_used": 1, "kv_blocks_total": 8}


def test_the_engine_view_follows_a_restarted_server(page, serve_app, engine):
    feed = {"steps": [step_record(i) for i in range(1, 51)], "down": False, "refused": 0}

    def steps(route):  # GET /v1/engine/steps of a server that goes away and comes back counting from 1 again
        if feed["down"]:
            feed["refused"] += 1
            return route.abort()
        query = parse_qs(urlparse(route.request.url).query)
        since, limit = int(query["since"][0]), int(query["limit"][0])
        newer = [s for s in feed["steps"] if s["id"] > since][-limit:]
        return route.fulfill(json={"replicas": [{"replica": "engine", "steps": newer}]})

    with serve_app(engine, ServerSettings(), rag=fake_rag) as running:
        page.route("**/v1/engine/steps*", steps)
        open_page(page, running.url)
        page.click("button[data-tab=engine]")
        page.wait_for_function("document.querySelectorAll('.steps-chart rect[data-step=\"50\"]').length")
        feed["down"] = True
        while not feed["refused"]:
            page.wait_for_timeout(100)
        feed.update(steps=[step_record(i) for i in range(1, 4)], down=False)
        page.wait_for_function("document.querySelectorAll('.steps-chart rect').length === 3", timeout=10_000)
        assert newest_step(page) == 3


def test_the_engine_view_marks_passage_kv_copied_in(page, serve_app, engine):
    copied = {**step_record(2), "tokens": {"decode": 0, "prefill": 30, "embed": 0}, "copied_tokens": 90,
              "recomputed_tokens": 10}
    feed = [step_record(1), copied, step_record(3)]
    with serve_app(engine, ServerSettings(), rag=fake_rag) as running:
        page.route("**/v1/engine/steps*", lambda route: route.fulfill(
            json={"replicas": [{"replica": "engine", "steps": feed}]}))
        open_page(page, running.url)
        page.click("button[data-tab=engine]")
        page.wait_for_selector(".steps-chart rect[data-step='3']", state="attached")
        assert page.eval_on_selector_all(".steps-chart rect.copied", "rs => rs.map(r => r.dataset.step)") == ["2"]
        title = page.text_content(".steps-chart rect.copied[data-step='2'] title")
        assert "90 tokens copied in, 10 computed again" in title
        heights = page.eval_on_selector_all(".steps-chart rect[data-step='2']",
                                            "rs => rs.map(r => +r.getAttribute('height'))")
        assert heights[1] == pytest.approx(3 * heights[0])  # prefill below, copied above: 30 and 90 tokens
