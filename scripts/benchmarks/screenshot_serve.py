"""Drive the ``simcse serve`` page in headless Chromium and save a screenshot (docs/figures/serve_demo.png).

    python -m scripts.benchmarks.screenshot_serve                       # starts `simcse serve` (the default) itself
    python -m scripts.benchmarks.screenshot_serve --url http://127.0.0.1:8000   # a server that is already running

It types a query with the keyboard, waits for the results, checks them against the JSON API, runs the
similarity box and saves a full-page screenshot. The browser is Debian's ``chromium`` (or
``$SIMCSE_CHROMIUM``) driven by playwright's Python API; no browser is downloaded. The helpers here are
also what ``tests/e2e/test_e2e_serve_browser.py`` uses.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from scripts.benchmarks.common import REPO, api_get, check_loopback, start_server

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DEFAULT_QUERY = "A man is playing a guitar."


def find_chromium() -> str | None:
    """``$SIMCSE_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH, else None."""
    env = os.environ.get("SIMCSE_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def launch(playwright, executable: str):
    """A headless Chromium browser from ``executable`` (no network services, no first-run work)."""
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)


def block_outside_requests(page, base_url: str) -> list[str]:
    """Abort every request of ``page`` that leaves ``base_url``; return the list they are recorded in."""
    outside: list[str] = []
    origin = base_url.rstrip("/")

    def handle(route):
        url = route.request.url
        if url.startswith(origin + "/") or url == origin or url.startswith("data:"):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    page.route("**/*", handle)
    return outside


def open_page(page, base_url: str) -> None:
    """Load the page and wait until it has read the model information and the examples."""
    page.goto(base_url + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)


def _searches(page) -> int:
    return int(page.evaluate("Number(document.body.dataset.searches || 0)"))


def rendered_hits(page) -> list[dict]:
    """The result list as shown: ``[{"rank", "sentence", "score", "shown", "bar"}]`` (score from the item's
    data, shown = the score text, bar = the bar's width in pixels)."""
    return page.eval_on_selector_all("#results li.result", """items => items.map(li => ({
        rank: Number(li.dataset.rank), sentence: li.querySelector('.sentence').textContent,
        score: Number(li.dataset.score), shown: li.querySelector('.score').textContent,
        bar: li.querySelector('.bar > span').getBoundingClientRect().width}))""")


def _wait_search_done(page, before: int) -> None:
    # an attribute selector, not wait_for_function: the page's Content-Security-Policy forbids eval
    page.wait_for_selector(f"body[data-searches='{before + 1}']", state="attached", timeout=60_000)


def search_with_keyboard(page, query: str, top_k: int | None = None, threshold: float | None = None) -> list[dict]:
    """Set the controls, press "/" to focus the search box, type ``query``, press Enter; return the hits."""
    if top_k is not None:
        page.fill("#top-k", str(top_k))
    if threshold is not None:
        page.fill("#threshold", str(threshold))
    page.locator("body").click(position={"x": 2, "y": 2})  # focus outside any input
    before = _searches(page)
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "query", "'/' did not focus the search box"
    page.keyboard.press("Control+A")
    page.keyboard.type(query)
    page.keyboard.press("Enter")
    _wait_search_done(page, before)
    return rendered_hits(page)


def click_example(page, i: int = 0) -> tuple[str, list[dict]]:
    """Click the ``i``-th example query; return (its text, the hits shown)."""
    button = page.locator("#examples button.example").nth(i)
    text = button.text_content()
    before = _searches(page)
    button.click()
    _wait_search_done(page, before)
    return text, rendered_hits(page)


def compare_sentences(page, a: str, b: str) -> float:
    """Fill the similarity box with ``a`` and ``b``, press Compare, return the score it shows."""
    page.fill("#sentence1", a)
    page.fill("#sentence2", b)
    page.evaluate("delete document.getElementById('sim-result').dataset.score")
    page.click("#sim-button")
    page.wait_for_selector("#sim-result[data-score]", timeout=60_000)
    return float(page.get_attribute("#sim-result", "data-score"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running server (default: start `simcse serve` with --serve-args)")
    p.add_argument("--serve-args", default="", help="arguments for `simcse serve` when it is started here")
    p.add_argument("--query", default=DEFAULT_QUERY)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--out", default=str(REPO / "docs" / "figures" / "serve_demo.png"))
    p.add_argument("--width", type=int, default=1000)
    args = p.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("error: the playwright package is missing: pip install playwright (its browser download is "
                         "not needed)") from None
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("error: no Chromium found: apt-get install chromium (or set SIMCSE_CHROMIUM)")
    proc, url = (None, check_loopback(args.url)) if args.url else start_server(args.serve_args.split())
    try:
        with sync_playwright() as pw:
            browser = launch(pw, chromium)
            page = browser.new_page(viewport={"width": args.width, "height": 900})
            outside = block_outside_requests(page, url)
            open_page(page, url)
            score = compare_sentences(page, "A man is playing a guitar.", "Someone plays an instrument.")
            hits = search_with_keyboard(page, args.query, top_k=args.top_k, threshold=0)
            api = api_get(url, "/api/search", query=args.query, top_k=args.top_k, threshold=0)["results"]
            same = [(h["sentence"], h["score"]) for h in hits] == [(h["sentence"], h["score"]) for h in api]
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"page results equal the API's: {same}; similarity shown: {score:.4f}; requests leaving the server: "
          f"{len(outside)}; wrote {args.out}")
    return 0 if same and not outside else 1


if __name__ == "__main__":
    sys.exit(main())
