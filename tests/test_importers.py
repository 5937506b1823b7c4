"""Importers: small files written here in exactly the upstream formats (lm-evaluation-harness's
evaluation_tracker output, HELM's run folder, py-irt's JSONL), round-tripped to the long format."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from jeirt_ray.cli.main import app
from jeirt_ray.data import DataError, load_data
from jeirt_ray.data.importers import HarnessOptions, import_results, near_duplicate_names

DATE = "2024-06-26T18-52-00.123456"
FEWSHOT = "Question: What is 1+1?\nAnswer: 2"


def harness_record(task: str, doc_id: int, label: float, filt: str = "none", metric: str = "acc") -> dict:
    """A record as lm_eval's evaluator builds it and evaluation_tracker writes it (arguments as
    gen_args_i/arg_j, target as str)."""
    question = f"Question: {task} question number {doc_id}?\nAnswer:"
    prompt = f"{FEWSHOT}\n\n{question}"
    return {"doc_id": doc_id, "doc": {"question": f"{task} question number {doc_id}?", "answer": "x"},
            "target": "1", "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": " 1"},
                                         "gen_args_1": {"arg_0": prompt, "arg_1": " 2"}},
            "resps": [[["-1.5", "False"]], [["-0.5", "True"]]], "filtered_resps": [["-1.5", "False"], ["-0.5", "True"]],
            "filter": filt, "metrics": [metric, "acc_norm"] if metric == "acc" else [metric],
            "doc_hash": f"{task}-doc-{doc_id}", "prompt_hash": "p", "target_hash": "t", metric: label,
            **({"acc_norm": 1 - label} if metric == "acc" else {})}


def write_harness_model(root: Path, model: str, labels: dict[str, list[float]], parquet: bool = False) -> Path:
    folder = root / model.replace("/", "__")
    folder.mkdir(parents=True)
    configs = {task: {"task": task, "num_fewshot": 1, "fewshot_delimiter": "\n\n"} for task in labels}
    (folder / f"results_{DATE}.json").write_text(json.dumps({
        "results": {t: {"alias": t, "acc,none": float(np.mean(v))} for t, v in labels.items()}, "configs": configs,
        "config": {"model": "hf", "model_args": f"pretrained={model},dtype=bfloat16"}, "model_name": model,
        "model_name_sanitized": model.replace("/", "__")}))
    for task, values in labels.items():
        if task == "gsm8k":  # a generative task: two filters, exact_match
            records = [harness_record(task, i, v, f, "exact_match") for i, v in enumerate(values)
                       for f in ("strict-match", "flexible-extract")]
            for r in records:
                if r["filter"] == "flexible-extract":
                    r["exact_match"] = 1.0
        else:
            records = [harness_record(task, i, v) for i, v in enumerate(values)]
        path = folder / f"samples_{task}_{DATE}.{'parquet' if parquet else 'jsonl'}"
        if parquet:
            pq.write_table(pa.Table.from_pylist(records), path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def harness_dir(tmp_path):
    root = tmp_path / "harness"
    planted = {"org/model-a": {"arc_easy": [1, 0, 1], "gsm8k": [0, 1]},
               "org/model-b": {"arc_easy": [0, 0, 1, 1]},
               "other/Model_A": {"arc_easy": [1, 1], "gsm8k": [1, 0]}}  # Parquet, as the leaderboard's details
    for i, (model, labels) in enumerate(planted.items()):
        write_harness_model(root, model, labels, parquet=i == 2)
    return root, planted


def test_harness_round_trip(harness_dir):
    root, planted = harness_dir
    data, report = import_results("harness", root, progress=False)
    assert sorted(data.models) == sorted(planted) and report["skipped"] == []
    got = {(data.models[m], data.question_ids[q]): y for m, q, y in zip(data.m_idx, data.q_idx, data.labels)}
    want = {(model, f"{task}/{task}-doc-{i}"): v for model, tasks in planted.items()
            for task, values in tasks.items() for i, v in enumerate(values)}
    assert got == want  # gsm8k under strict-match, not the flexible-extract 1.0s
    text = dict(zip(data.question_ids, data.texts))["arc_easy/arc_easy-doc-2"]
    assert text == "Question: arc_easy question number 2?\nAnswer:"  # the few-shot example cut off
    assert set(data.benchmarks) == {"arc_easy", "gsm8k"}
    assert report["near_duplicate_model_names"] == [["org/model-a", "other/Model_A"]]


def test_harness_choices_are_overridable(harness_dir):
    root, _ = harness_dir
    opts = HarnessOptions(metrics={"arc_easy": "acc_norm"}, filters={"gsm8k": "flexible-extract"}, text_field="question")
    data, _ = import_results("harness", root, harness=opts, mapping={"other/Model_A": "org/model-a"}, progress=False)
    assert sorted(data.models) == ["org/model-a", "org/model-b"]
    rows = {(data.models[m], data.question_ids[q]): y for m, q, y in zip(data.m_idx, data.q_idx, data.labels)}
    assert rows[("org/model-b", "arc_easy/arc_easy-doc-0")] == 1.0  # acc_norm = 1 - acc
    assert all(v == 1.0 for (_, q), v in rows.items() if q.startswith("gsm8k"))
    assert dict(zip(data.question_ids, data.texts))["gsm8k/gsm8k-doc-1"] == "gsm8k question number 1?"


def test_broken_files_are_skipped_and_listed(harness_dir):
    root, planted = harness_dir
    folder = root / "org__model-b"
    good = (folder / f"samples_arc_easy_{DATE}.jsonl").read_text().splitlines()
    good[1] = '{"doc_id": 1, "truncated'
    (folder / f"samples_arc_easy_{DATE}.jsonl").write_text("\n".join(good) + "\n")
    (folder / f"samples_mmlu_{DATE}.parquet").write_bytes(b"not parquet")
    bad_label = harness_record("hellaswag", 0, 0.5)
    bad_label["acc"] = 7.0
    (folder / f"samples_hellaswag_{DATE}.jsonl").write_text(json.dumps(bad_label) + "\n")
    data, report = import_results("harness", root, progress=False)
    skipped = "\n".join(report["skipped"])
    assert f"samples_arc_easy_{DATE}.jsonl, line 2: not a JSON record" in skipped
    assert f"samples_mmlu_{DATE}.parquet: unreadable" in skipped
    assert "column 'acc', value 7.0: the label metric is not a number in [0, 1]" in skipped
    b = int(np.flatnonzero(data.models == "org/model-b")[0])
    assert (data.m_idx == b).sum() == len(planted["org/model-b"]["arc_easy"]) - 1  # the rest imported


def test_an_imported_harness_folder_is_a_data_source_and_trains(harness_dir, tmp_path, monkeypatch):
    root, _ = harness_dir
    assert load_data(root).n_models == 3
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    r = runner.invoke(app, ["data", "import", "harness", str(root), "--out", str(tmp_path / "long")])
    assert r.exit_code == 0, r.output
    assert "may be one LLM" in r.output and json.loads((tmp_path / "long" / "import_report.json").read_text())["files"] == 5
    assert load_data(tmp_path / "long").n_responses == load_data(root).n_responses
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "long"), "--encoder", "hashing", "--fixed",
                            "--members", "1", "--held-out-benchmarks", "0", "--out", str(tmp_path / "space")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["data", "import", "harness", str(root), "--out", str(tmp_path / "x"), "--metric", "acc"])
    assert r.exit_code == 2 and "expected TASK=NAME" in r.output


def write_helm_run(root: Path, model: str, labels: list[float]) -> None:
    run = root / f"mmlu:subject=anatomy,method=multiple_choice_joint,model={model.replace('/', '_')}"
    run.mkdir(parents=True)
    name = run.name
    (run / "run_spec.json").write_text(json.dumps({"name": name, "adapter_spec": {"method": "multiple_choice_joint",
                                                                                  "model": model}}))
    states = [{"instance": {"input": {"text": f"Anatomy question {i}?"}, "references": [], "split": "test",
                            "id": f"id{i}"}, "train_trial_index": 0, "request": {"prompt": "..."}}
              for i in range(len(labels))]
    states.append({"instance": {"input": {"text": "PERTURBED"}, "id": "id0",
                                "perturbation": {"name": "typo"}}, "train_trial_index": 0})
    (run / "scenario_state.json").write_text(json.dumps({"adapter_spec": {}, "request_states": states}))
    stats = []
    for i, y in enumerate(labels):
        for trial in (0, 1):  # two train trials: the label is their mean
            stats.append({"instance_id": f"id{i}", "train_trial_index": trial, "stats": [
                {"name": {"name": "exact_match", "split": "test"}, "count": 1, "sum": y, "mean": float(y if trial == 0 else 1)},
                {"name": {"name": "num_output_tokens", "split": "test"}, "count": 1, "sum": 3, "mean": 3.0}]})
    stats.append({"instance_id": "id0", "train_trial_index": 0, "perturbation": {"name": "typo"},
                  "stats": [{"name": {"name": "exact_match", "split": "test", "perturbation": {"name": "typo"}},
                             "count": 1, "sum": 0, "mean": 0.0}]})
    (run / "per_instance_stats.json").write_text(json.dumps(stats))


def test_helm_round_trip(tmp_path):
    write_helm_run(tmp_path / "runs", "openai/gpt2", [0, 1, 0])
    write_helm_run(tmp_path / "runs", "meta/llama-7b", [1, 1, 0])
    data, report = import_results("helm", tmp_path / "runs", progress=False)
    assert sorted(data.models) == ["meta/llama-7b", "openai/gpt2"] and report["skipped"] == []
    rows = {(data.models[m], data.question_ids[q]): y for m, q, y in zip(data.m_idx, data.q_idx, data.labels)}
    qid = "mmlu:subject=anatomy,method=multiple_choice_joint/id0"
    assert rows[("openai/gpt2", qid)] == 0.5 and rows[("meta/llama-7b", qid)] == 1.0
    assert dict(zip(data.question_ids, data.texts))[qid] == "Anatomy question 0?"
    assert set(data.benchmarks) == {"mmlu"} and data.n_questions == 3
    with pytest.raises(DataError, match="no label metric"):
        import_results("helm", tmp_path / "runs", metric="bleu", progress=False)


def test_pyirt_round_trip_and_the_texts_it_needs(tmp_path):
    (tmp_path / "irt.jsonl").write_text(
        json.dumps({"subject_id": "llm-1", "responses": {"q1": 1, "q2": 0}}) + "\n"
        + json.dumps({"subject_id": "llm-2", "responses": {"q1": 0, "q2": 1, "q9": 1}}) + "\n")
    (tmp_path / "texts.csv").write_text("question_id,text,benchmark\nq1,What is 2+2?,math\nq2,Capital of France?,geo\n")
    data, report = import_results("pyirt", tmp_path / "irt.jsonl", texts=tmp_path / "texts.csv", progress=False)
    assert data.n_models == 2 and data.n_responses == 4 and sorted(set(data.benchmarks)) == ["geo", "math"]
    assert report["skipped"] == [f"{tmp_path / 'irt.jsonl'}, line 2, column 'responses', value 'q9': "
                                 "item has no text in the texts file"]
    with pytest.raises(DataError, match="py-irt data has no question texts.*--texts FILE"):
        import_results("pyirt", tmp_path / "irt.jsonl", progress=False)


def test_near_duplicate_names():
    assert near_duplicate_names(["meta-llama/Llama-3-8B", "llama_3_8b", "gpt-4o", "GPT4o", "mistral"]) == \
        [["GPT4o", "gpt-4o"], ["llama_3_8b", "meta-llama/Llama-3-8B"]]


def test_a_missing_folder_is_named_as_missing(tmp_path):
    from jeirt_ray.data import DataError
    from jeirt_ray.data.importers import import_results
    for fmt in ("harness", "helm", "lighteval"):
        with pytest.raises(DataError, match=f"nope: no such file or folder: give the folder .* of {fmt} results"):
            import_results(fmt, tmp_path / "nope")
