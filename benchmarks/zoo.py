"""A thousand-model zoo, served: a space of every LLM of the Open LLM Leaderboard folder (5,049)
against one of 31 of them, in one run, and the bulk onboarding that builds the large one.

    python benchmarks/zoo.py [--data DIR] --out results/zoo.json [--small 31] [--bulk 1000]

1. A space is trained on all but `--bulk` LLMs of the folder (a few epochs, `--members`; latency
   does not depend on how well it is trained) and registered; the `--bulk` others are then
   onboarded from their own folder with `jeirt onboard --from-data` (on the local Ray cluster, one
   new version): `bulk.s_per_llm` against the target of 1,000 LLMs in <= 10 min.
2. A space of `--small` LLMs (chosen by seed) is trained the same way.
3. Each is served in turn from deployments/local.yaml (the decision log on, as shipped), and
   `--requests` test questions are routed one at a time (POST /v1/route, top_k 3): p50 and p99 of
   the whole request and of its routing part (the Server-Timing header's `route`), and the Router
   replica's memory (RSS and USS, psutil) after the load. Also measured there: a page of
   GET /v1/models (limit 100, a name filter and a size bound) and GET /v1/similar.
4. On the large space, the web explorer in Chromium (Playwright; skipped with a line where there is
   none): from a fresh page to an LLM found by part of its name, its ten nearest listed, the first
   time (the server computes the version's LLM table) and `--browser-runs` more times, each in a
   fresh browser context (nothing cached in the browser); from navigation, going on as soon as the
   page shows the space (not at its load event, which waits for plotly.js: also reported).
Targets: the large space's route p50 <= 1.5 x the small one's, in the same run; the explorer's
find within 3 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import service

ROOT = Path(__file__).resolve().parents[1]


def _train_and_register(folder: Path, encoder: str, members: int, epochs: int, name: str, seed: int):
    from jeirt_ray.core import paths
    from jeirt_ray.data import load_data
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.experiments.methods import train_space
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.experiments.selection import fixed_config
    from jeirt_ray.tracking.registry import SpaceRegistry
    prep = prepare(load_data(folder), make_encoder(encoder), seed=seed, cache_root=paths.cache_dir(), progress=False)
    start = time.perf_counter()
    space = train_space(prep, fixed_config("jeirt").model_copy(update={"max_epochs": epochs}), members=members,
                        progress=False)
    train_s = time.perf_counter() - start
    reg = SpaceRegistry()
    reg.promote(name, reg.register(space, name), "champion")
    texts = [str(prep.data.texts[i]) for i in prep.rows("test")]
    return texts, train_s


def _router_memory() -> dict:
    import psutil
    import ray
    from ray.util.state import list_actors
    out = []
    for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")]):
        if a.class_name.endswith("Router"):
            info = psutil.Process(a.pid).memory_full_info()
            out.append({"rss_mb": info.rss / 2**20, "uss_mb": info.uss / 2**20})
    return out[0] if len(out) == 1 else {"replicas": out}


async def _timed(url: str, texts: list[str], n: int) -> dict:
    import httpx
    total, routing = [], []
    async with httpx.AsyncClient(timeout=120) as client:
        for i in range(n + 20):
            start = time.perf_counter()
            r = await client.post(f"{url}/v1/route", json={"query": texts[i % len(texts)], "top_k": 3})
            took = time.perf_counter() - start
            r.raise_for_status()
            if i >= 20:  # warm-up
                total.append(took * 1000)
                parts = dict(p.split(";dur=") for p in r.headers["server-timing"].split(", "))
                routing.append(float(parts["route"]))
        pages = {}
        for label, params in (("first_page", {}), ("contains", {"contains": "mistral"}),
                              ("max_params_b", {"max_params_b": 8, "limit": 1000})):
            start = time.perf_counter()
            r = await client.get(f"{url}/v1/models", params=params)
            r.raise_for_status()
            pages[label] = {"ms": (time.perf_counter() - start) * 1000, "llms": len(r.json()["data"]),
                            "has_more": r.json()["has_more"]}
        first = r.json()["data"][0]["id"]
        start = time.perf_counter()
        r = await client.get(f"{url}/v1/similar", params={"llm": first, "k": 10})
        r.raise_for_status()
        pages["similar_ms"] = (time.perf_counter() - start) * 1000
    return {"requests": n, "p50_ms": float(np.percentile(total, 50)), "p99_ms": float(np.percentile(total, 99)),
            "route_part_p50_ms": float(np.percentile(routing, 50)), "listing": pages}


def _explorer(url: str, find: str, runs: int) -> dict:
    import shutil
    import statistics
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("explorer: not measured: no Chromium on PATH (Debian: apt-get install chromium)", flush=True)
        return {"skipped": "no Chromium on PATH"}
    from playwright.sync_api import sync_playwright
    times, loads = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(runs + 1):
            context = browser.new_context(viewport={"width": 1200, "height": 900})
            page = context.new_page()
            start = time.perf_counter()
            # as a user does: on as soon as the page shows the space, not after its load event (which
            # waits for plotly.js, 4.6 MB, that only the charts need)
            page.goto(f"{url}/", wait_until="commit")
            page.wait_for_function("document.getElementById('space').textContent.includes('LLMs')")
            page.click("#tab-llms")
            page.wait_for_selector("#llm-table tbody tr", timeout=60_000)
            page.fill("#find", find)
            page.press("#find", "Enter")
            page.wait_for_selector("#similar li", timeout=60_000)
            times.append(time.perf_counter() - start)
            found = page.inner_text("#found-row tbody td")
            near = len(page.query_selector_all("#similar li"))
            page.wait_for_function("performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
            loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
            context.close()
        browser.close()
    return {"find": find, "found": found, "nearest_listed": near, "first_s": times[0],
            "median_s": statistics.median(times[1:]), "max_s": max(times[1:]), "runs": runs, "target_s": 3.0,
            "load_event_median_s": statistics.median(loads[1:])}


def main():
    ap = parser(__doc__)
    ap.add_argument("--small", type=int, default=31, help="LLMs of the small space")
    ap.add_argument("--bulk", type=int, default=1000, help="LLMs onboarded in bulk into the large space")
    ap.add_argument("--members", type=int, default=5, help="ensemble members of each space (as trained by default)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--browser-runs", type=int, default=5, help="explorer runs in Chromium after the first")
    args = ap.parse_args()
    from jeirt_ray.data import load_data
    from jeirt_ray.data.llm_table import read_models
    from jeirt_ray.population.llms import select_models
    source = dataset_path(args.data, "openllm")
    data, table = load_data(source), read_models(source)
    rng = np.random.default_rng(args.split_seed)
    order = rng.permutation(data.models)
    with tempfile.TemporaryDirectory() as home:
        home = Path(home)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home}/mlflow.db"
        os.environ["JEIRT_HOME"] = str(home)
        folders = {"known": order[:len(order) - args.bulk], "new": order[len(order) - args.bulk:],
                   "small": order[:args.small]}
        for part, names in folders.items():
            select_models(data, np.sort(names)).save(home / part)
            if table is not None:
                table.reindex(np.sort(names)).reset_index().to_csv(home / part / "models.csv", index=False)
        texts, big_train_s = _train_and_register(home / "known", args.encoder, args.members, args.epochs, "zoo",
                                                 args.split_seed)
        _, small_train_s = _train_and_register(home / "small", args.encoder, args.members, args.epochs, "small",
                                               args.split_seed)
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "jeirt_ray.cli", "onboard", "--from-data", str(home / "new"),
                              "--space", "models:/zoo@champion", "--promote", "--json"],
                             capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
        if run.returncode != 0:
            sys.exit(f"bulk onboarding failed ({run.returncode}): {run.stdout[-2000:]} {run.stderr[-2000:]}")
        bulk = json.loads(run.stdout[run.stdout.index("{"):])
        bulk_wall = time.perf_counter() - start
        bulk_out = {"llms": args.bulk, "onboarded": bulk["onboarded"], "failed": len(bulk["failed"]),
                    "fit_s": bulk["fit_s"], "command_s": bulk_wall, "s_per_llm": bulk_wall / args.bulk,
                    "target_s_per_llm": 0.6}
        print("bulk", bulk_out, flush=True)
        served = {}
        for label, model in (("small", "small"), ("large", "zoo")):
            with service(home, args.encoder, args.threads, model=model) as url:
                out = asyncio.run(_timed(url, texts, args.requests))
                out["router_memory"] = _router_memory()
                if label == "large":  # part of a known LLM's name, as a user would type it
                    out["explorer"] = _explorer(url, folders["known"][0].split("/")[-1][:12], args.browser_runs)
            served[label] = out
            print(label, out, flush=True)
    served["small"]["llms"], served["large"]["llms"] = args.small, len(order)
    ratio = served["large"]["p50_ms"] / served["small"]["p50_ms"]
    write_json(args.out, {
        "data": {"folder": str(source), "llms": len(order), "small": args.small, "bulk": args.bulk},
        "encoder": args.encoder, "members": args.members,
        "train_s": {"large_known": big_train_s, "small": small_train_s}, "bulk_onboarding": bulk_out,
        "served": served, "route_p50_ratio": ratio, "route_part_p50_ratio":
            served["large"]["route_part_p50_ms"] / served["small"]["route_part_p50_ms"],
        "target": {"route_p50_ratio_max": 1.5, "met": ratio <= 1.5, "explorer_s_max": 3.0,
                   "explorer_met": served["large"]["explorer"].get("max_s", float("inf")) <= 3.0}})


if __name__ == "__main__":
    main()
