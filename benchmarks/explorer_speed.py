"""The web explorer on a real space: time to the first useful view in a headless browser, and the
map and LLM endpoints' time and size.

    python benchmarks/explorer_speed.py [--data DIR] --out results/explorer_speed.json [--members 5]

Trains the fixed JE-IRT configuration on --data (default mmlu_pro; MiniLM embeddings from the
cache), registers it in a temporary registry, serves it with deployments/local.yaml on a local
Ray cluster, then measures:
- `/v1/explore/map` and `/v1/explore/llms`: the first call (computed for the version) and a
  second (cached), with the response size;
- in Chromium (Playwright): from navigation to the first useful view (the Route form usable and
  the space named, i.e. /v1/models answered; not the load event, which waits for plotly.js), to a
  routed question's pick shown and its bar chart drawn (the first chart also waits for plotly.js
  to arrive and parse), and to the map drawn after clicking Map (each --runs times, in fresh
  browser contexts, so nothing is cached), and a second question's pick once all has loaded.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare

ROOT = Path(__file__).resolve().parents[1]


def timed_get(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    r = httpx.get(url, timeout=300)
    r.raise_for_status()
    return time.perf_counter() - start, len(r.content)


def main():
    ap = parser(__doc__)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir(), progress=False)
    space = train_space(prep, members=args.members, progress=False)

    home = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
    os.environ.update(MLFLOW_TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}", JEIRT_HOME=str(home))
    import ray
    from playwright.sync_api import sync_playwright
    from ray import serve

    from jeirt_ray.tracking.registry import SpaceRegistry
    from jeirt_ray.serving.deployment.deploy import deploy, load_config
    reg = SpaceRegistry()
    reg.promote("explore-bench", reg.register(space, "explore-bench"), "champion")
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    raw["applications"][0]["args"]["encoder"] = args.encoder
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (home / "local.yaml").write_text(yaml.safe_dump(raw))
    ray.init(address="local", log_to_driver=False)
    url = deploy(load_config(home / "local.yaml", model="explore-bench", port=port))
    out = {"data": data.name, "questions": data.n_questions, "llms": data.n_models, "members": args.members}
    for what in ("map", "llms"):
        first_s, size = timed_get(f"{url}/v1/explore/{what}")
        cached_s, _ = timed_get(f"{url}/v1/explore/{what}")
        out[f"{what}_endpoint"] = {"first_seconds": first_s, "cached_seconds": cached_s, "bytes": size}

    question = str(data.texts[0])
    api = []
    for t in data.texts[:10]:
        start = time.perf_counter()
        httpx.post(f"{url}/v1/route", json={"queries": [str(t)], "policy": "tuned"}, timeout=60).raise_for_status()
        api.append(time.perf_counter() - start)
    out["api_route_seconds"] = {"median": statistics.median(api), "max": max(api)}
    views: dict[str, list[float]] = {"first_useful_view": [], "routed_pick": [], "routed_chart": [], "map_drawn": [],
                                     "second_route_pick": []}
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(args.runs):
            page = browser.new_context().new_page()
            start = time.perf_counter()
            page.goto(f"{url}/", wait_until="commit")  # not the load event: plotly.js arrives after the view is usable
            page.wait_for_function("document.getElementById('space').textContent.startsWith('space ')")
            views["first_useful_view"].append(time.perf_counter() - start)
            page.fill("#query", question)
            start = time.perf_counter()
            page.click("#route-button")
            page.wait_for_selector(".chosen[data-query='0']")
            views["routed_pick"].append(time.perf_counter() - start)
            page.wait_for_selector("#bars-0 .main-svg")
            views["routed_chart"].append(time.perf_counter() - start)
            start = time.perf_counter()
            page.click("#tab-map")
            page.wait_for_selector("#map-plot .legendtext")
            views["map_drawn"].append(time.perf_counter() - start)
            page.click("#tab-route")  # a second question, once everything has loaded
            page.fill("#query", str(data.texts[1]))
            start = time.perf_counter()
            page.click("#route-button")
            page.wait_for_selector(".chosen[data-query='0']")
            views["second_route_pick"].append(time.perf_counter() - start)
            page.context.close()
        browser.close()
    out["browser_seconds"] = {k: {"median": statistics.median(v), "max": max(v), "runs": v} for k, v in views.items()}
    serve.shutdown()
    ray.shutdown()
    shutil.rmtree(home, ignore_errors=True)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
