"""Onboarding real LLMs through their endpoint: mmlu_pro's four recorded LLMs, replayed.

    python benchmarks/onboarding_endpoint.py [--data DIR] [--split-seed S] [--max-answers 50]
        [--random] --out results/onboarding_endpoint.json

A space is trained without the four LLMs that the dataset can replay (outputs/<model>.jsonl.gz)
and registered (a temporary registry); a loopback OpenAI-compatible server (api/replay.py)
replays each one's recorded answer to whatever question it is sent. `jeirt onboard`'s flow
(api/onboard_endpoint.py) then asks each LLM `--max-answers` training-split questions (adaptive, or
with --random in random order), grades the answers with answers.csv.gz (MMLU-Pro's letter
rule, or its strict first rule for the LLMs whose training-split labels follow that one), fits its vector and registers a new version. Reported per LLM: the agreement of the grades
with the dataset's labels, the questions asked, the wall time, its routing accuracy and
prediction accuracy on the test split against a space trained jointly with it, its predicted
accuracy (with interval) against its true test accuracy, and what the questions cost at its price.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from _common import SHARED, dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.data.answer_key import AnswerKey
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.experiments.selection import fixed_config
from jeirt_ray.routing.outcomes import available_argmax


def main():
    ap = parser(__doc__)
    ap.add_argument("--max-answers", type=int, default=50)
    ap.add_argument("--random", action="store_true", help="random questions instead of adaptive ones")
    ap.add_argument("--members", type=int, default=1)
    args = ap.parse_args()
    folder = dataset_path(args.data, "mmlu_pro")
    data = load_data(folder)
    recorded = sorted(m for m in data.models.tolist() if (folder / "outputs" / f"{m}.jsonl.gz").exists())
    if not recorded:
        raise SystemExit(f"{folder / 'outputs'}: no recorded outputs to replay")
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir(), progress=False)
    config = fixed_config("jeirt")
    joint = train_space(prep, config, members=args.members, progress=False)
    blind_prep = dataclasses.replace(prep, split=dataclasses.replace(prep.split, heldout_models=recorded))
    blind = train_space(blind_prep, config, members=args.members, progress=False).without_models(recorded)

    train_ids = set(data.question_ids[prep.split.question_part == 0].tolist())
    labels = {(data.models[m], data.question_ids[q]): float(y) for q, m, y in zip(data.q_idx, data.m_idx, data.labels)}
    keys, rule_agreement = {}, {}
    for kind in ("letter", "letter_strict"):
        full_key = AnswerKey.read(folder / "answers.csv.gz", default_kind=kind)
        keys[kind] = AnswerKey({q: a for q, a in full_key.answers.items() if q in train_ids}, f"answers.csv.gz ({kind})")
    from jeirt_ray.api.replay import read_outputs
    for llm in recorded:  # which rule graded this LLM's run: the one its training-split labels follow
        outputs = read_outputs(folder / "outputs" / f"{llm}.jsonl.gz")
        rule_agreement[llm] = {kind: float(np.mean([key.grade(q, o).label == labels[(llm, q)] for q, o in outputs.items()
                                                    if q in train_ids and (llm, q) in labels]))
                               for kind, key in keys.items()}
    test_q = np.flatnonzero(prep.split.question_part == 2)
    full = np.full((data.n_questions, data.n_models), np.nan)
    full[data.q_idx, data.m_idx] = data.labels
    known = list(blind.model_names)
    p_joint_all = joint.predict_proba(prep.X[test_q])
    from jeirt_ray.routing.prices import PriceTable, resolve_prices
    prices = resolve_prices(recorded, PriceTable.read(SHARED / "prices.csv")) if (SHARED / "prices.csv").exists() else None

    from jeirt_ray.api.onboard_endpoint import onboard_endpoint
    from jeirt_ray.api.replay import ReplayServer
    from jeirt_ray.tracking.registry import SpaceRegistry
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        reg = SpaceRegistry()
        reg.promote("bench", reg.register(blind, "bench"), "champion")
        with ReplayServer(folder, models=recorded) as server:
            for i, llm in enumerate(recorded):
                m = int(np.flatnonzero(data.models == llm)[0])
                before = len(server.requests)
                rule = max(rule_agreement[llm], key=rule_agreement[llm].get)
                key = keys[rule]
                report = onboard_endpoint(
                    server.url, llm, answer_key=key, space="models:/bench@champion", max_answers=args.max_answers,
                    strategy="random" if args.random else "adaptive", answer_log=Path(tmp) / f"{llm}.jsonl", progress=False, seed=i,
                    price_usd_per_mtok=None if prices is None else (float(prices.input_usd_per_mtok[i]),
                                                                    float(prices.output_usd_per_mtok[i])))
                new = report.pop("new_space")
                requests = len(server.requests) - before
                records = [json.loads(line) for line in (Path(tmp) / f"{llm}.jsonl").read_text().splitlines()]
                outputs = {r["question_id"]: r["output"] for r in records if r["output"] is not None}
                agree = [key.grade(q, o).label == labels[(llm, q)] for q, o in outputs.items() if (llm, q) in labels]
                # the test split, as benchmarks/onboarding.py --adaptive scores it
                cols = [int(np.flatnonzero(data.models == n)[0]) for n in known] + [m]
                lab = full[test_q][:, cols]
                avail = ~np.isnan(lab)
                p_new_space = new.predict_proba(prep.X[test_q])
                p_mine = p_new_space[:, [new.model_names.index(n) for n in known] + [new.model_names.index(llm)]]
                p_joint = p_joint_all[:, [joint.model_names.index(n) for n in known] + [joint.model_names.index(llm)]]
                seen = avail[:, -1]
                truth = lab[seen, -1]
                rows.append({
                    "model": llm, "rule": rule, "rule_agreement_train": rule_agreement[llm], "graded": report["graded"], "requests": requests, "failed": report["failed"],
                    "no_answer": report["no_answer"], "agreement_with_labels": float(np.mean(agree)),
                    "agreement_answers": len(agree), "wall_seconds": report["wall_seconds"],
                    "version": report["version"], "cost_usd": report["cost_usd"], "tokens": report["tokens"],
                    "routing_accuracy": float(np.nanmean(lab[np.arange(len(test_q)), available_argmax(p_mine, avail)])),
                    "joint_routing_accuracy": float(np.nanmean(lab[np.arange(len(test_q)),
                                                                   available_argmax(p_joint, avail)])),
                    "prediction_accuracy": float(((p_mine[seen, -1] > 0.5) == (truth > 0.5)).mean()),
                    "joint_prediction_accuracy": float(((p_joint[seen, -1] > 0.5) == (truth > 0.5)).mean()),
                    "predicted_accuracy": report["predicted"]["overall"],
                    "test_accuracy": float(truth.mean()),
                    "test_predicted_accuracy": float(p_mine[seen, -1].mean())})
                r = rows[-1]
                print(f"{llm:30s} agreement {r['agreement_with_labels']:.3f} routing {r['routing_accuracy']:.4f} "
                      f"(joint {r['joint_routing_accuracy']:.4f}) accuracy predicted {r['test_predicted_accuracy']:.3f} "
                      f"true {r['test_accuracy']:.3f}; {r['requests']} requests, {r['wall_seconds']:.1f} s", flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in
            ("agreement_with_labels", "routing_accuracy", "joint_routing_accuracy", "wall_seconds")}
    mean["gap_to_joint_points"] = (mean["joint_routing_accuracy"] - mean["routing_accuracy"]) * 100
    mean["accuracy_mae_points"] = float(np.mean([abs(r["test_predicted_accuracy"] - r["test_accuracy"]) for r in rows])) * 100
    write_json(args.out, {"data": data.name, "split_seed": args.split_seed, "max_answers": args.max_answers,
                          "strategy": "random" if args.random else "adaptive", "members": args.members,
                          "llms": rows, "mean": mean})


if __name__ == "__main__":
    main()
