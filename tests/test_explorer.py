"""The web explorer in a real headless browser (Chromium from Debian's packages, driven by
Playwright) against a real Serve deployment of the routing app (one Ray cluster for the module).
Screenshots go to tests/artifacts/ (ignored by git)."""

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.serving.explorer import llm_table, space_map

from .conftest import missing, serving

import httpx
import ray
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
NAME, TOKEN = "explore-test", "explore-token"


@pytest.fixture(scope="module")
def space(synthetic):
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    return train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=30), members=2, progress=False)


def test_map_and_table_without_a_browser(space):
    m = space_map(space, max_points=200)
    assert m["questions_total"] == len(space.question_ids) and m["questions_shown"] == 200
    shown = dict(zip(*np.unique(m["points"]["benchmark"], return_counts=True)))
    assert set(shown) == set(space.question_benchmarks) and max(shown.values()) - min(shown.values()) <= 1
    assert len(m["llms"]["name"]) == len(space.model_names) and sum(m["difficulty_histogram"]["counts"]) == m["questions_total"]
    assert m["points"]["text"][0] == space.question_texts[space.question_ids.index(m["points"]["question_id"][0])][:300]
    t = llm_table(space)
    bench = np.asarray(space.question_benchmarks)
    first = bench == t["benchmarks"][0]
    expected = space.predict_proba(space.question_embeddings[first]).mean(0)
    np.testing.assert_allclose([row[0] for row in t["accuracy"]], expected, atol=1e-4)


@pytest.fixture(scope="module")
def browser():
    from playwright import sync_api as sync
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        missing("no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def service(space, tmp_path_factory):
    def edit(app):
        next(d for d in app["deployments"] if d["name"] == "Router")["user_config"]["refresh_s"] = 1

    with serving(space, NAME, tmp_path_factory.mktemp("explore"), token=TOKEN, edit=edit, cpus=0.25,
                 encoder="hashing") as url:
        yield url


@pytest.fixture
def page(browser, service):
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    outside = []
    context.route("**/*", lambda r: (outside.append(r.request.url), r.abort()) if not r.request.url.startswith(service)
                  else r.continue_())
    pg = context.new_page()
    pg.goto(f"{service}/")
    yield pg
    assert outside == []  # the page works offline: nothing but this service is asked for
    context.close()


def test_the_page_routes_as_the_api_does(page, service, space):
    question = str(space.question_texts[7])
    page.fill("#query", question)
    page.click("#route-button")
    chosen = page.wait_for_selector(".chosen[data-query='0']", timeout=30_000).inner_text()
    api = httpx.post(f"{service}/v1/route", json={"query": question, "policy": "tuned"}, timeout=30).json()
    assert chosen == api["results"][0]["chosen"]
    page.wait_for_function("document.querySelector('.result .others').textContent.includes('under most_likely')")
    facts = page.inner_text(".result .facts")
    assert f"{api['results'][0]['difficulty']:.2f}" in facts
    why = page.inner_text(".result .why")
    best = api["results"][0]["scores"][0]["model"]
    assert (f"{chosen} has the highest P(correct)" in why) if best == chosen else (f"Why not {best}" in why)
    page.wait_for_selector("#bars-0 .main-svg")
    # every LLM served is named on the chart (not every other one; the onboarding test may have added one)
    ticks = page.eval_on_selector_all("#bars-0 .ytick text", "ns => ns.map(n => n.textContent)")
    served = [m["id"] for m in httpx.get(f"{service}/v1/models", timeout=30).json()["data"]]
    assert sorted(t.removeprefix("▶ ") for t in ticks) == sorted(served)
    page.screenshot(path=str(ARTIFACTS / "explorer-route.png"), full_page=True)


def test_the_map_shows_every_benchmark_and_the_keyboard_moves_between_views(page, space):
    page.focus("#tab-route")
    page.keyboard.press("ArrowRight")
    assert page.is_visible("#panel-map") and not page.is_visible("#panel-route")
    page.wait_for_selector("#map-plot .legendtext", timeout=30_000)
    legend = set(page.eval_on_selector_all("#map-plot .legendtext", "els => els.map(e => e.textContent)"))
    assert legend == set(space.question_benchmarks) | {"LLMs"}
    page.screenshot(path=str(ARTIFACTS / "explorer-map.png"), full_page=True)


def test_an_onboarded_llm_appears_in_the_table(page, service, space):
    responses = [{"question_id": q, "label": float(i % 3 != 0)} for i, q in enumerate(space.question_ids[:80])]
    r = httpx.post(f"{service}/v1/onboard", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60,
                   json={"model": "brand-new-llm", "responses": responses, "promote": True})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while "brand-new-llm" not in [m["id"] for m in httpx.get(f"{service}/v1/models", timeout=30).json()["data"]]:
        assert time.monotonic() < deadline, "the onboarded version was not picked up"
        time.sleep(0.5)
    page.reload()
    page.click("#tab-llms")
    row = page.wait_for_selector("#llm-table tr.onboarded", timeout=30_000)
    assert row.inner_text().startswith("brand-new-llm")
    assert "version 2 @champion" in page.inner_text("#versions")
    page.screenshot(path=str(ARTIFACTS / "explorer-llms.png"), full_page=True)
