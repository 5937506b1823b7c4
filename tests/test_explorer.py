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
from jeirt_ray.serving.explorer.views import llm_table, space_map

from .conftest import missing, serving

import httpx
import ray
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
NAME, TOKEN = "explore-test", "explore-token"


ZOO = 5049  # the Open LLM Leaderboard's count: the explorer is for a zoo of thousands


@pytest.fixture(scope="module")
def space(synthetic):
    """16 trained LLMs and 5,033 fine-tunes of them: each a trained LLM's vector moved a little,
    its answers the parent's with a few flipped, a size of 1-70B (a zoo, as the explorer meets one)."""
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    trained = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=30), members=2,
                          progress=False)
    rng = np.random.default_rng(0)
    n = ZOO - len(trained.model_names)
    parents = np.arange(n) % len(trained.model_names)
    names = [f"zoo/{trained.model_names[p]}-tune-{i:04d}" for i, p in enumerate(parents)]
    vectors = [m[parents] + rng.normal(0, 0.05 * m.std(), (n, m.shape[1])).astype(np.float32)
               for m in (trained.model_vectors(i) for i in range(len(trained.members)))]
    answers = trained.answers[parents].copy()
    flip = (rng.random(answers.shape) < 0.05) & (answers != 255)
    answers[flip] = 100 - answers[flip]
    zoo = trained.with_models(names, vectors, answers)
    zoo.metadata["llms"] = {name: {"params_b": float(rng.choice([1.1, 7.2, 13, 70]))} for name in names}
    return zoo


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
    api = httpx.post(f"{service}/v1/route", json={"query": question, "policy": "tuned", "top_k": 30}, timeout=30).json()
    assert chosen == api["results"][0]["chosen"]
    page.wait_for_function("document.querySelector('.result .others').textContent.includes('under most_likely')")
    facts = page.inner_text(".result .facts")
    assert f"{api['results'][0]['difficulty']:.2f}" in facts
    why = page.inner_text(".result .why")
    best = api["results"][0]["scores"][0]["model"]
    assert (f"{chosen} has the highest P(correct)" in why) if best == chosen else (f"Why not {best}" in why)
    page.wait_for_selector("#bars-0 .main-svg")
    # the chart names the 30 LLMs of the highest p, the chosen one always among them
    ticks = page.eval_on_selector_all("#bars-0 .ytick text", "ns => ns.map(n => n.textContent)")
    scores = [x["model"] for x in api["results"][0]["scores"]]
    top = scores[:30] if chosen in scores[:30] else scores[:29] + [chosen]
    assert sorted(t.removeprefix("▶ ") for t in ticks) == sorted(top)
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
    while not httpx.get(f"{service}/v1/models", params={"contains": "brand-new"}, timeout=30).json()["data"]:
        assert time.monotonic() < deadline, "the onboarded version was not picked up"
        time.sleep(0.5)
    page.reload()
    page.click("#tab-llms")
    page.wait_for_selector("#llm-table tbody tr", timeout=30_000)
    page.fill("#find", "brand-new-llm")
    page.press("#find", "Enter")
    row = page.wait_for_selector("#found-row tr.onboarded", timeout=30_000)
    assert row.inner_text().startswith("brand-new-llm")
    assert "version 2 @champion" in page.inner_text("#versions")
    page.screenshot(path=str(ARTIFACTS / "explorer-llms.png"), full_page=True)


def test_a_zoo_of_5049_llms_loads_and_finds_an_llm_and_its_twins(page, service, space):
    """From a fresh page to an LLM found by part of its name among 5,049, with the LLMs that answer
    most like it listed; its nearest are its own family (fine-tunes of one parent). How fast (the
    target: 3 s) is measured on the real 5,049 by benchmarks/zoo.py, not here."""
    start = time.monotonic()
    page.goto(f"{service}/", wait_until="commit")  # on as soon as the space shows, as a user does
    page.wait_for_function("document.getElementById('space').textContent.includes('LLMs')")
    assert f"{ZOO}" in page.inner_text("#space") or f"{ZOO + 1}" in page.inner_text("#space")  # + brand-new-llm
    page.click("#tab-llms")
    page.wait_for_selector("#llm-table tbody tr", timeout=30_000)
    page.fill("#find", "llm-03-tune-4")  # part of a name: the first such LLM
    page.press("#find", "Enter")
    page.wait_for_selector("#similar li", timeout=30_000)
    elapsed = time.monotonic() - start
    found = page.inner_text("#found-row tbody td")
    assert found.startswith("zoo/synthetic-llm-03-tune-4"), found
    assert len(page.query_selector_all("#llm-table tbody tr")) == 100
    near = page.eval_on_selector_all("#similar li strong", "ns => ns.map(n => n.textContent)")
    family = [n for n in near if n == "synthetic-llm-03" or n.startswith("zoo/synthetic-llm-03-")]
    assert len(near) == 10 and len(family) >= 9, near
    page.screenshot(path=str(ARTIFACTS / "explorer-zoo.png"), full_page=True)
    print(f"\n[explorer] {ZOO} LLMs: page to an LLM found and its twins listed in {elapsed:.2f} s")



def test_plotly_is_served_compressed_and_whole(service):
    """plotly.js (4.6 MB) goes gzipped to a client that takes gzip (compressed once per replica)
    and decodes to the file the plotly package ships; a client that takes no gzip gets the file."""
    import importlib.resources
    shipped = (importlib.resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    with httpx.Client(timeout=60) as client:
        for _ in range(2):  # the second from the replica's cache
            zipped = client.get(f"{service}/static/plotly.min.js", headers={"accept-encoding": "gzip"})
            assert zipped.headers["content-encoding"] == "gzip" and zipped.headers["vary"] == "Accept-Encoding"
            assert zipped.num_bytes_downloaded < len(shipped) / 2 and zipped.content == shipped  # httpx decodes
        plain = client.get(f"{service}/static/plotly.min.js", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == shipped
