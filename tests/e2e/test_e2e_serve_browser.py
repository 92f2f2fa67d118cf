"""The `simcse serve` page in a real headless Chromium (Debian's `chromium` through playwright's Python API).

Outside CI a missing browser skips this test; with CI=true it fails, so a CI machine without Chromium
cannot pass silently. The page is driven with the helpers of scripts/benchmarks/screenshot_serve.py.
"""
from __future__ import annotations

import os

import pytest

from scripts.benchmarks import screenshot_serve

pytest.importorskip("fastapi", reason="pip install 'simcse[serve]'")

CORPUS = [
    "A man is playing a guitar.",
    "A woman is playing the violin.",
    "A band plays music on a stage.",
    "The stock market fell sharply today.",
    "Shares of the bank dropped after the report.",
    "The central bank raised interest rates.",
    "A dog is running in the park.",
    "Two cats are sleeping on the sofa.",
    "A horse jumps over a fence.",
    "The football team won the championship.",
    "The player scored a goal in the last minute.",
    "It is raining heavily in the city.",
    "Snow covered the mountains overnight.",
    "A chef is slicing an onion in the kitchen.",
    "She is baking bread for breakfast.",
    "The train to London was delayed.",
]
EXAMPLES = ["The weather is cold and snowy.", "Someone is cooking food."]


def _require(what: str, ok: bool) -> None:
    if not ok:
        msg = f"{what} is missing: the browser test cannot run (apt-get install chromium; pip install playwright)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def shot():
    return screenshot_serve


@pytest.fixture(scope="module")
def chromium(shot):
    try:
        import playwright.sync_api  # noqa: F401
        have_playwright = True
    except ImportError:
        have_playwright = False
    _require("playwright (Python package)", have_playwright)
    path = shot.find_chromium()
    _require("Chromium", path is not None)
    return path


@pytest.fixture(scope="module")
def server(minilm_dir):
    from simcse import SimCSE
    from simcse.serving.serve import running_server
    from simcse.serving.service import SearchService
    from simcse.serving.webapp import create_app

    tool = SimCSE(minilm_dir, pooler="avg", device="cpu")
    tool.build_index(CORPUS)
    service = SearchService(tool, model_name="all-MiniLM-L6-v2", source="/tmp/corpus.txt", examples=EXAMPLES)
    with running_server(create_app(service)) as url:
        yield url


def _pairs(hits):
    return [(h["rank"], h["sentence"], h["score"]) for h in hits]


def test_page_in_headless_chromium_shows_the_api_results(chromium, shot, server, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = shot.launch(pw, chromium)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            outside = shot.block_outside_requests(page, server)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            shot.open_page(page, server)
            about = page.text_content("#about")
            assert f"Model all-MiniLM-L6-v2 (pooler avg) · index of {len(CORPUS)} sentences of corpus.txt" in about

            # typed with the keyboard: "/" focuses the box, Enter searches
            hits = shot.search_with_keyboard(page, "Someone plays an instrument.", top_k=3, threshold=0)
            api = shot.api_get(server, "/api/search", query="Someone plays an instrument.", top_k=3, threshold=0)
            assert _pairs(hits) == _pairs(api["results"]) and len(hits) == 3
            assert {h["sentence"] for h in hits} == set(CORPUS[:3])  # the music sentences, really
            assert [h["shown"] for h in hits] == [f"{h['score']:.4f}" for h in api["results"]]
            assert hits[0]["bar"] > hits[-1]["bar"] > 0  # bars drawn in score order
            assert " ms" in page.text_content("#status")

            # a clicked example fills the box and searches
            text, hits = shot.click_example(page, 1)
            assert text == EXAMPLES[1] and page.input_value("#query") == text
            api = shot.api_get(server, "/api/search", query=text, top_k=3, threshold=0)
            assert _pairs(hits) == _pairs(api["results"])
            assert hits[0]["sentence"] in CORPUS[13:15]

            # the similarity box shows the API's cosine
            score = shot.compare_sentences(page, "A man is playing a guitar.", "Someone plays an instrument.")
            api = shot.api_get(server, "/api/similarity", sentence1="A man is playing a guitar.",
                               sentence2="Someone plays an instrument.")
            assert score == api["score"] and f"{score:.4f}" in page.text_content("#sim-result")

            # a bad value shows the API's message, not a broken page
            shot.search_with_keyboard(page, "a query", top_k=0)
            assert "top_k must be between 1 and 100" in page.text_content("#status")
            assert page.locator("#results li").count() == 0

            page.screenshot(path=str(tmp_path / "serve_page.png"), full_page=True)
            # readable on a narrow screen: nothing wider than a phone's viewport
            page.set_viewport_size({"width": 360, "height": 740})
            shot.search_with_keyboard(page, "The team won the match.", top_k=5, threshold=0)
            assert page.evaluate("document.documentElement.scrollWidth") <= 360
            page.screenshot(path=str(tmp_path / "serve_page_narrow.png"), full_page=True)
            assert not outside, f"the page asked for outside resources: {outside}"
            assert not errors, errors
        finally:
            browser.close()
    png = (tmp_path / "serve_page.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
