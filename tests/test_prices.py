"""Prices as data, the cost policies, calibration and the cost-accuracy frontier."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jeirt_ray as jr
from jeirt_ray.routing.calibration import ece, fit_temperatures
from jeirt_ray.routing.frontier import arena_score, cost_to_reach, figures, hull_value
from jeirt_ray.routing.prices import (PriceError, PriceTable, normalise_name, resolve_prices, size_in_billions,
                                      token_counter)

from .conftest import shared_dataset

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data():
    return jr.load_data(None)  # SYNTHETIC


def price_rows(models, seed=0):
    rng = np.random.default_rng(seed)
    price = np.round(np.geomspace(0.1, 20, len(models))[rng.permutation(len(models))], 3)
    return [{"model": m, "input_usd_per_mtok": p, "output_usd_per_mtok": 3 * p} for m, p in zip(models, price)]


@pytest.fixture(scope="module")
def price_file(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("prices") / "prices.csv"
    pd.DataFrame(price_rows(data.models.tolist())).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def space(data, price_file):
    return jr.train(data, encoder="hashing", search=False, members=1, held_out_benchmarks=0, prices=price_file,
                    progress=False)


def test_a_price_table_matches_names_across_case_and_punctuation(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("model,input_usd_per_mtok,output_usd_per_mtok,basis\nGPT-4o,5,15,list\n"
                    "Llama-3-70B-Instruct,0.9,0.9,hosted-by-size\n")
    table = PriceTable.read(path)
    assert normalise_name("gpt_4o") == normalise_name("GPT-4o")
    prices = resolve_prices(["gpt_4o", "llama 3 70b instruct", "gpt-4o-mini", "Qwen2-7B-chat", "mystery"], table)
    assert prices.sources == ["table", "table", "tokencost", "size proxy", "dearest"]
    assert prices.input_usd_per_mtok[0] == 5 and prices.output_usd_per_mtok[1] == 0.9
    assert prices.input_usd_per_mtok[3] == 0.20  # 7B: Together's 4.1-8B tier
    assert prices.input_usd_per_mtok[4] == prices.input_usd_per_mtok.max()
    line = prices.summary()
    assert "2 from the table" in line and "tokencost (gpt-4o-mini)" in line and "dearest (mystery)" in line
    assert size_in_billions("Mixtral-8x7B-Instruct") == 56


@pytest.mark.parametrize("text, words", [
    ("model,input_usd_per_mtok,output_usd_per_mtok\nA,cheap,1\n", ["row 1", "'input_usd_per_mtok'", "'cheap'"]),
    ("model,input_usd_per_mtok,output_usd_per_mtok\nA,-1,1\n", ["row 1", "finite and >= 0"]),
    ("model,input_usd_per_mtok,output_usd_per_mtok\nA,1,1\na,2,2\n", ["row 2", "priced twice"]),
    ("model,price\nA,1\n", ["expected columns"]),
])
def test_a_bad_price_table_names_the_row(tmp_path, text, words):
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(PriceError) as e:
        PriceTable.read(path)
    for w in words:
        assert w in str(e.value)


def test_tokens_are_counted_offline():
    counter = token_counter()
    n = counter.count(["What is 17 times 23?", "A much longer question " * 20])
    assert "WordPiece" in counter.name and 5 <= n[0] <= 12 and n[1] > 60


def test_the_space_keeps_its_prices_and_routes_by_cost(space, data):
    assert space.metadata["prices"]["models"] == data.models.tolist()
    texts = data.texts[:40].tolist()
    best = space.route(texts, policy="most_likely", top_k=None)
    cheap = space.route(texts, policy="quality_target", target_share=0.9, top_k=None)
    for b, c in zip(best, cheap):
        costs = {s["model"]: s["cost"] for s in c["scores"]}
        ps = {s["model"]: s["p_correct"] for s in c["scores"]}
        assert c["p_correct"] >= 0.9 * b["p_correct"] - 1e-9
        # the cheapest of those that reach the target
        assert costs[c["chosen"]] == min(costs[m] for m in costs if ps[m] >= 0.9 * b["p_correct"] - 1e-9)
        assert isinstance(c["expected_cost"], float) and c["expected_cost"] > 0
    assert np.mean([c["expected_cost"] for c in cheap]) < np.mean([b["expected_cost"] for b in best])
    absolute = space.route(texts[:5], policy="quality_target", target_p=0.99)  # none reaches it: the best p
    assert [a["chosen"] for a in absolute] == [b["chosen"] for b in best[:5]]
    with pytest.raises(ValueError, match="exactly one of target_p"):
        space.route(texts[:1], policy="quality_target")


def test_a_budget_is_met_on_average_on_queries_it_was_not_calibrated_on(space, data):
    """The cost weight is calibrated on the space's own questions; the spend is measured on new
    queries (another draw of the synthetic benchmarks' questions). Open loop, the spend follows
    the new queries' own P(correct): measured 25% over at 0.5 USD per 1,000 here (2% on the
    calibration questions), so the stated share is 30%; a pacer that reads the spend closes the
    loop (routing.learning). Where the budget is below the cheapest LLM's spend: that spend."""
    from jeirt_ray.data.synthetic import generate
    router = space.router()
    texts = [t for t in generate(seed=7).texts.tolist() if t not in set(space.question_texts)][:300]
    assert len(texts) == 300
    x = space.encoder.encode(texts)
    spend = []
    budgets = (0.05, 0.5, 5.0)
    for budget in budgets:
        decisions = router.route(x, texts=texts, policy="budget", budget_per_1k=budget)
        spend.append(np.mean([d["expected_cost"] for d in decisions]) * 1000)
    assert spend[0] < spend[1] < spend[2]  # more money, more spent
    cheapest = router.cost_matrix(x, texts).min(1).mean() * 1000
    for budget, s in zip(budgets, spend):
        assert s <= budget * 1.30 or s <= cheapest * 1.05, (budget, s, cheapest)
    assert spend[2] >= 0.5 * min(5.0, router.cost_matrix(x, texts).max(1).mean() * 1000)  # the budget is used


def test_budget_weights_are_bounded_and_read_to_three_digits(space):
    from jeirt_ray.routing.router import BUDGET_CACHE
    router = space.router()
    assert router.budget_weight(1.0001) == router.budget_weight(1.0)
    for i in range(BUDGET_CACHE + 40):
        router.budget_weight(0.01 * (i + 1))
    assert len(router._budget_weights) == BUDGET_CACHE


def test_calibration_and_temperatures():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, size=(4000, 2))
    y = (rng.random((4000, 2)) < p).astype(float)
    assert ece(p[:, 0], y[:, 0]) < 0.03
    over = 1 / (1 + np.exp(-3 * np.log(p / (1 - p))))  # overconfident
    assert ece(over[:, 0], y[:, 0]) > 0.05
    temps, report = fit_temperatures(over, y)
    assert report["val_log_loss_after"] < report["val_log_loss_before"] and np.allclose(temps.t, 3, atol=0.4)
    same, report = fit_temperatures(p, y)
    assert report["val_log_loss_after"] <= report["val_log_loss_before"]


def test_frontier_figures():
    assert arena_score(0.15, 0.6688) == pytest.approx(0.6689, abs=2e-4)  # RouterArena's MIRT-BERT row: 66.89
    hull = [(1.0, 0.5), (2.0, 0.7), (4.0, 0.8)]
    assert hull_value(hull, 3.0) == pytest.approx(0.75) and hull_value(hull, 0.5) is None
    assert cost_to_reach(hull, 0.6) == pytest.approx(1.5) and cost_to_reach(hull, 0.9) is None
    f = figures(np.array([1.0, 2.0, 4.0, 3.0]), np.array([0.5, 0.7, 0.8, 0.6]), ref_cost=4.0, ref_acc=0.8,
                cost_range=(1.0, 4.0))
    assert f["cost_share_at_best_accuracy"] == pytest.approx(1.0)
    assert f["accuracy_at_cost_share"] == {"0.1": None, "0.25": 0.5, "0.5": 0.7}
    assert 0.5 < f["aiq"] < 0.8


def test_cost_study_against_every_baseline(data, price_file):
    from jeirt_ray.experiments.cost_study import cost_study
    prep = jr.prepare(data, encoder="hashing", progress=False)
    prices = resolve_prices(data.models, PriceTable.read(price_file))
    out = cost_study(prep, prices, members=1, n_boot=40, open_weight=np.arange(data.n_models) % 2 == 0)
    methods = out["methods"]
    assert set(methods) >= {"jeirt", "mf", "knn", "cluster", "threshold_2llm", "oracle", "random_mix"}
    for name, m in methods.items():
        assert m["aiq_ci95"][0] < m["aiq_ci95"][1], name  # resampled questions move it
        assert set(m["accuracy_at_cost_share"]) == {"0.1", "0.25", "0.5"}
    assert methods["oracle"]["aiq"] >= max(m["aiq"] for k, m in methods.items() if k != "oracle")
    assert out["best_single"]["llm"] in data.models and len(out["aiq_jeirt_minus_cluster_ci95"]) == 2
    assert set(out["calibration"]) == {"jeirt", "mf", "knn"} and "ece_per_llm" in out["calibration"]["jeirt"]
    assert set(out["sensitivity"]) == {"open_weight_x0.5", "open_weight_x2", "base_ranking"}
    json.dumps(out, allow_nan=False)


@pytest.mark.real_data
def test_the_frontier_benchmark_on_a_partial_price_table(tmp_path):
    """The command held-out data will meet: a price table that lists only some LLMs, under names
    spelt differently."""
    folder = shared_dataset("theoremqa")
    models = sorted(pd.read_csv(folder / "responses.csv.gz").model.unique())
    rows = price_rows([m.upper().replace("-", "_") for m in models[: len(models) // 2]])
    pd.DataFrame(rows).to_csv(tmp_path / "prices.csv", index=False)
    out = tmp_path / "f.json"
    run = subprocess.run([sys.executable, "benchmarks/cost_frontier.py", "--data", str(folder), "--prices",
                          str(tmp_path / "prices.csv"), "--out", str(out), "--seed", "1", "--encoder", "hashing",
                          "--members", "1", "--n-boot", "30"], cwd=ROOT, capture_output=True, text=True,
                         env={**__import__("os").environ, "JEIRT_HOME": str(tmp_path / "home")})
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"{len(models) // 2} from the table" in run.stdout
    result = json.loads(out.read_text())
    assert {"llm", "accuracy", "cost_per_1k"} <= set(result["best_single"])
    for name in ("jeirt", "mf", "knn", "cluster", "threshold_2llm", "oracle"):
        m = result["methods"][name]
        assert {"aiq", "aiq_ci95", "cost_share_at_best_accuracy", "accuracy_at_cost_share"} <= set(m)
    assert "aiq_jeirt_minus_cluster_ci95" in result and result["split_seed"] == 1


def test_the_gateway_prices_an_answer_by_its_usage(space, data):
    from jeirt_ray.serving.relay.gateway import answer_cost, routing_headers, routing_of
    router = space.router()
    llm = data.models[0]
    i = router.index[llm]
    usd = answer_cost(router, llm, {"prompt_tokens": 1000, "completion_tokens": 500})
    assert usd == pytest.approx((1000 * router.prices.input_usd_per_mtok[i] + 500 * router.prices.output_usd_per_mtok[i])
                                / 1e6)
    assert answer_cost(router, llm, None) is None and answer_cost(router, "unknown", {"prompt_tokens": 1}) is None
    (decision,) = router.route(space.question_embeddings[:1], texts=space.question_texts[:1], policy="most_likely")
    routing, _ = routing_of(decision, "demo/1", None, "0" * 28)
    headers = routing_headers(routing, decision["chosen"], [])
    assert float(headers["x-jeirt-expected-cost"]) == pytest.approx(decision["expected_cost"], rel=1e-6)


def test_the_report_has_a_cost_study(space, data, price_file, tmp_path):
    from jeirt_ray.analysis.report import run_report
    prep = jr.prepare(data, encoder="hashing", progress=False)
    prices = resolve_prices(data.models, PriceTable.read(price_file))
    res = run_report(prep, space, tmp_path, studies=["cost"], prices=prices)
    assert res["cost"]["methods"]["jeirt"]["aiq"] > 0 and (tmp_path / "cost_frontier.png").exists()
    md = (tmp_path / "report.md").read_text()
    assert "## Cost-accuracy frontier" in md and "| jeirt |" in md
    skipped = run_report(prep, space, tmp_path / "none", studies=["cost"])
    assert "no price table" in skipped["cost"]["skipped"]


def test_recalibration_is_chosen_out_of_half():
    from jeirt_ray.routing.calibration import choose_recalibration
    rng = np.random.default_rng(1)
    p = rng.uniform(0.05, 0.95, size=(3000, 3))
    y = (rng.random((3000, 3)) < p).astype(float)
    over = 1 / (1 + np.exp(-2.5 * np.log(p / (1 - p))))
    temps, report = choose_recalibration(over, y)
    assert report["choice"] in ("global", "per_llm") and np.allclose(temps.t, 2.5, atol=0.4)
    temps, report = choose_recalibration(p, y)  # calibrated already: fitting buys nothing out of half
    assert report["out_of_half_log_loss"]["none"] <= report["out_of_half_log_loss"]["per_llm"] + 1e-3


def test_jeirt_train_keeps_the_prices_and_answer_lengths_of_a_folder(data, tmp_path):
    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    folder = tmp_path / "data"
    data.save(folder)
    # recorded answer lengths for a few LLMs, as mmlu_pro's outputs_meta.csv.gz has them
    rows = [{"model": m, "question_id": q, "output_chars": 400 * (1 + i % 3)}
            for i, m in enumerate(data.models[:3]) for q in data.question_ids[:300]]
    pd.DataFrame(rows).to_csv(folder / "outputs_meta.csv", index=False)
    pd.DataFrame(price_rows(data.models.tolist())).to_csv(tmp_path / "prices.csv", index=False)
    result = CliRunner().invoke(app, ["train", "--data", str(folder), "--encoder", "hashing", "--fixed", "--members",
                                      "1", "--held-out-benchmarks", "0", "--prices", str(tmp_path / "prices.csv"),
                                      "--out", str(tmp_path / "space")])
    assert result.exit_code == 0, result.output
    space = jr.Space.load(tmp_path / "space")
    lengths = space.metadata["answer_tokens"]
    assert "outputs_meta.csv" in lengths["source"] and lengths["per_llm"][0] == pytest.approx(100.0)
    assert lengths["per_llm"][5] is None  # no answers recorded: the default
    (d,) = space.route(["What is 17 times 23?"], policy="budget", budget_per_1k=1.0)
    assert d["expected_cost"] > 0


@pytest.mark.parametrize("text, words", [
    ("model,input_usd_per_mtok,output_usd_per_mtok\nllm-a,3e-06,1.5e-05\n", ["looks like USD per token", "1,000,000"]),
    ("[1, 2]", ["row 1", "not a row of model"]),
])
def test_price_tables_in_the_wrong_units_or_shape_are_refused(tmp_path, text, words):
    path = tmp_path / ("p.csv" if text.startswith("model") else "p.yaml")
    path.write_text(text)
    with pytest.raises(PriceError) as e:
        PriceTable.read(path)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_price_table_that_names_none_of_the_llms_is_refused(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("model,input_usd_per_mtok,output_usd_per_mtok\nsomeone-else,1,2\n")
    with pytest.raises(PriceError, match="names none of the 2 LLMs"):
        resolve_prices(["llm-a", "llm-b"], PriceTable.read(path))


def test_an_onboarded_llm_keeps_its_prices_and_the_estimates_use_the_learned_answer_lengths(space, data):
    """Recorded answer lengths of 100 + 50 x (benchmark's index) tokens for every LLM: a new
    LLM's questions are estimated at its benchmark's length (not a flat default), and an LLM
    onboarded at LLM 0's prices costs what LLM 0 costs on every query (not the dearest's)."""
    from jeirt_ray.routing.prices import OutputLengths, question_costs_of
    names = sorted(set(space.question_benchmarks))
    length = {b: 100.0 + 50 * i for i, b in enumerate(names)}
    M = len(space.model_names)
    per_bench = np.array([[length[b]] * M for b in names])
    lengths = OutputLengths(per_bench, per_bench.mean(0), names, source="test").to_dict()
    space = dataclasses.replace(space, metadata={**space.metadata, "answer_tokens": lengths})  # the fixture's stays
    costs = question_costs_of(space, (0.0, 1e6))  # 1 USD per answer token, input free: the cost is the length
    assert [costs[q] for q in space.question_ids[:50]] == pytest.approx(
        [length[b] for b in space.question_benchmarks[:50]])
    first = space.metadata["prices"]
    price0 = (first["input_usd_per_mtok"][0], first["output_usd_per_mtok"][0])
    assert price0[1] < max(first["output_usd_per_mtok"])  # LLM 0 is not the dearest
    labels = (np.arange(40) % 3 > 0).astype(float)
    new = space.onboard("newcomer", list(space.question_ids[:40]), labels, price_usd_per_mtok=price0)
    assert new.metadata["prices"]["sources"][-1] == "onboarding"
    texts = data.texts[:20].tolist()
    for d in new.route(texts, top_k=None, policy="most_likely"):
        cost = {s["model"]: s["cost"] for s in d["scores"]}
        assert cost["newcomer"] == pytest.approx(cost[space.model_names[0]])
    unpriced = space.onboard("unpriced", list(space.question_ids[:40]), labels)
    for d in unpriced.route(texts[:3], top_k=None, policy="most_likely"):
        cost = {s["model"]: s["cost"] for s in d["scores"]}
        assert cost["unpriced"] == pytest.approx(max(cost.values()))  # said as the dearest, as before
    with pytest.raises(ValueError, match="price_usd_per_mtok must be two numbers"):
        space.onboard("x", list(space.question_ids[:5]), labels[:5], price_usd_per_mtok=(1.0, -2.0))
