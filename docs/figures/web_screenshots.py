"""The web page's screenshots in docs/figures: a finished IRCoT trace and the engine view while six questions run.

    orthrus-rag-serve &                                  # the shipped models on the demo set, port 8000
    python docs/figures/web_screenshots.py --url http://127.0.0.1:8000

Drives Debian's chromium (`apt-get install chromium`) through Playwright.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent


def ircot_trace(browser, url: str, out: Path) -> None:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(url)
    page.wait_for_selector("#example option[value='demo:demo-q01']", state="attached")
    page.select_option("#example", "demo:demo-q01")
    page.select_option("#pipeline", "ircot")
    page.click("#ask-button")
    page.wait_for_selector(".gold", timeout=300_000)
    page.screenshot(path=str(out), full_page=True)
    page.close()


def engine_view(browser, url: str, out: Path) -> None:
    """Six questions at once (three Compare pages), the engine view seen meanwhile."""
    pages = []
    for left, right, example in (("ircot", "iter_retgen", "demo-q05"), ("standard_rag", "ircot", "demo-q09"),
                                 ("iter_retgen", "standard_rag", "demo-q13")):
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#pipeline option", state="attached")
        page.click("button[data-tab=compare]")
        question = page.eval_on_selector(f"#example option[value='demo:{example}']", "o => o.dataset.question")
        page.fill("#compare-question", question)
        page.select_option("#compare-left", left)
        page.select_option("#compare-right", right)
        page.click("#compare-button")
        pages.append(page)
    viewer = browser.new_page(viewport={"width": 1200, "height": 420})
    viewer.goto(url)
    viewer.click("button[data-tab=engine]")
    time.sleep(12)  # about a hundred steps of mixed work
    viewer.screenshot(path=str(out), full_page=True)
    for page in pages:
        page.wait_for_selector("#compare-button:not([disabled])", timeout=300_000)
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        ircot_trace(browser, args.url, args.out / "web_ircot_trace.png")
        engine_view(browser, args.url, args.out / "web_engine_view.png")
        browser.close()


if __name__ == "__main__":
    main()
