"""The report's studies beyond the geometry ones: costs (AIQ, CPT), the onboarding curve and
leave-one-benchmark-out, each checked on data with a planted answer."""

import numpy as np
import pytest

from jeirt_ray.routing.costs import default_costs, load_costs, read_cost_table
from jeirt_ray.routing.frontier import aiq, cpt, upper_hull


def test_default_costs_read_sizes_from_names():
    names = ["Llama-2-70b-hf", "Mixtral-8x7B-Instruct-v0.1", "Qwen1.5-110B", "Meta-Llama-3_1-8B",
             "Yi-6b-Chat", "Llama-3.1-405B-Inst-fp8", "Qwen2.5-3B-Instruct", "GPT-4o", "deepseek-v2.5-0908"]
    costs, source = default_costs(names)
    assert costs.tolist() == [70, 56, 110, 8, 6, 405, 3, 405, 405]
    assert "no size" in source["GPT-4o"] and "70B" in source["Llama-2-70b-hf"]


def test_cost_table_errors_name_the_problem(tmp_path):
    (tmp_path / "c.csv").write_text("model,cost\na,1\nb,x\n")
    with pytest.raises(ValueError, match=r"c.csv, line 3, column 'cost', value 'x'"):
        read_cost_table(tmp_path / "c.csv")
    with pytest.raises(ValueError, match="no cost for 1 LLM"):
        load_costs({"a": 1.0}, ["a", "b"])
    with pytest.raises(ValueError, match="cost of 'a' is -1"):
        load_costs({"a": -1}, ["a"])
    (tmp_path / "c.json").write_text('{"a": 2, "b": 0.5}')
    assert load_costs(read_cost_table(tmp_path / "c.json"), ["b", "a"]).tolist() == [0.5, 2.0]


def test_aiq_is_the_area_under_the_upper_hull():
    pts = [(1, 0.5), (2, 0.6), (3, 0.55), (4, 0.9)]
    # (2, 0.6) lies under the chord from (1, 0.5) to (4, 0.9); (3, 0.55) is dominated
    assert upper_hull(pts) == [(1, 0.5), (4, 0.9)]
    assert aiq(pts, (1, 4)) == pytest.approx(0.7, abs=1e-6)
    # a router point above the chord raises the area
    assert aiq(pts + [(2, 0.85)], (1, 4)) > 0.8


def test_cpt_of_a_perfect_and_a_blind_router():
    # 100 questions: the weak LLM is right on the first 50, the strong one on the first 90
    weak = (np.arange(100) < 50).astype(float)
    strong = (np.arange(100) < 90).astype(float)
    perfect = strong - weak  # knows exactly where the strong LLM helps
    res = cpt(perfect, strong, weak)
    assert res["cpt_50"] == pytest.approx(0.20) and res["cpt_80"] == pytest.approx(0.32)
    blind = np.random.default_rng(0).random(100)
    assert cpt(blind, strong, weak)["cpt_80"] > 0.5


def _three_benchmarks(seed=0, n_models=16, per_bench=100):
    """alpha and beta: twins (same words, same LLM ability pattern); gamma: its own words and the
    reverse ability pattern. Leaving alpha out costs little (beta covers it); leaving gamma out
    costs a lot, and gamma is the least aligned with what remains."""
    from jeirt_ray.data import ResponseData
    rng = np.random.default_rng(seed)
    words = {"alpha": "algebra equation variable integer matrix vector polynomial derivative".split(),
             "beta": "algebra equation variable integer matrix vector polynomial derivative".split(),
             "gamma": "sonnet poem verse novel stanza metaphor chapter narrator".split()}
    ability = np.linspace(-2.5, 2.5, n_models)
    texts, bench, p = [], [], []
    for b in ("alpha", "beta", "gamma"):
        for _ in range(per_bench):
            texts.append(" ".join(rng.choice(words[b], size=6)))
            bench.append(b)
            p.append(1 / (1 + np.exp(-(ability if b != "gamma" else -ability))))
    p = np.array(p)
    q, m = np.nonzero(np.ones_like(p, dtype=bool))
    y = (rng.random(len(q)) < p[q, m]).astype(np.float32)
    return ResponseData(np.array([f"q{i}" for i in range(len(texts))]), np.array(bench), np.array(texts),
                        np.array([f"llm{i}" for i in range(n_models)]), q, m, y, name="planted", synthetic=True)


def test_leave_one_benchmark_out_finds_the_unaligned_benchmark(tmp_path):
    from jeirt_ray.analysis.report import run_report
    from jeirt_ray.encoders import HashingEncoder
    from jeirt_ray.experiments.methods import train_space
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.model.train import TrainConfig
    prep = prepare(_three_benchmarks(), HashingEncoder(64), progress=False)
    main = train_space(prep, TrainConfig(kind="jeirt", dim=8, lr=3e-3, max_epochs=40), members=1, progress=False)
    res = run_report(prep, main, tmp_path, studies=["lobo"], progress=False)["lobo"]
    by = {r["benchmark"]: r for r in res["benchmarks"]}
    assert by["gamma"]["drop"] > max(by["alpha"]["drop"], by["beta"]["drop"]) + 0.1
    assert by["alpha"]["alignment"]["nearest"] == "beta" and by["alpha"]["alignment"]["max"] > 0.9
    assert by["gamma"]["alignment"]["max"] < min(by["alpha"]["alignment"]["max"], by["beta"]["alignment"]["max"])
    assert res["spearman_alignment_drop"] < 0
    assert (tmp_path / "lobo_alignment_drop.png").exists()
    assert "Leave one benchmark out" in (tmp_path / "report.md").read_text()


def test_onboarding_curve_approaches_joint_training(synthetic):
    import dataclasses

    from jeirt_ray.analysis.onboarding_curve import onboarding_curve
    from jeirt_ray.encoders import HashingEncoder
    from jeirt_ray.experiments.methods import train_space
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.model.train import TrainConfig
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    config = TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=60)
    held = [str(synthetic.models[0]), str(synthetic.models[5])]
    joint = train_space(prep, config, members=1, progress=False)
    blind = train_space(dataclasses.replace(prep, split=dataclasses.replace(prep.split, heldout_models=held)),
                        config, members=1, progress=False)
    res = onboarding_curve(prep, joint, blind, held, np.random.default_rng(0), fractions=(0.02, 0.25, 1.0))
    mean = res["mean"]
    # more data never hurts much, and all of it comes close to training the LLM jointly
    assert mean["random"]["1"] >= mean["random"]["0.02"] - 0.01
    assert abs(mean["random"]["1"] - mean["joint_accuracy"]) < 0.03
    assert set(mean["adaptive"]) == {"0.02", "0.25"}
    # budgets as response counts: one beyond an LLM's responses takes them all, without an adaptive row
    counts = onboarding_curve(prep, joint, blind, held, np.random.default_rng(0), responses=(10, 10**6))
    assert counts["responses"] == [10, 10**6] and set(counts["mean"]["random"]) == {"10", "1000000"}
    assert set(counts["mean"]["adaptive"]) == {"10"}
    assert counts["mean"]["random"]["1000000"] == pytest.approx(mean["random"]["1"], abs=0.01)
