"""Importers on the layouts people actually have, each written here in its upstream shape:
chat-template harness runs, several models' runs in one flat folder, re-runs, Git LFS pointer
stubs, py-irt's amortized input, HELM multiple choice, and the Open LLM Leaderboard's details
(v1: lighteval parquet; v2: harness samples)."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from jeirt_ray.cli.main import app
from jeirt_ray.data import DataError, load_data
from jeirt_ray.data.importers import import_results

from .test_importers import harness_record, write_helm_run

D1, D2, D3 = "2024-07-01T10-00-00.000001", "2024-07-02T11-00-00.000002", "2024-07-03T12-00-00.000003"
LFS = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 48213\n"


def labels_of(data) -> dict:
    return {(str(data.models[m]), str(data.question_ids[q])): float(y)
            for m, q, y in zip(data.m_idx, data.q_idx, data.labels)}


def write_run(folder: Path, model: str, date: str, task: str, labels: list[float], chat: bool = False,
              results: bool = True, model_args_only: bool = False) -> None:
    """One harness run as evaluation_tracker writes it: results_<date>.json and
    samples_<task>_<date>.jsonl side by side in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    if results:
        body = {"results": {task: {"acc,none": sum(labels) / len(labels)}},
                "configs": {task: {"task": task, "num_fewshot": 0}},
                "config": {"model": "local-chat-completions" if chat else "hf", "model_args": f"model={model}"}}
        if not model_args_only:
            body["model_name"] = model
        (folder / f"results_{date}.json").write_text(json.dumps(body))
    records = []
    for i, y in enumerate(labels):
        rec = harness_record(task, i, y)
        if chat:  # --apply_chat_template: the context is the JSON-encoded messages (few-shot = earlier turns)
            messages = [{"role": "system", "content": "You are a careful assistant."},
                        {"role": "user", "content": "Question: What is 1+1?"}, {"role": "assistant", "content": "2"},
                        {"role": "user", "content": f"Question: {task} question number {i}?"}]
            rec["arguments"] = {"gen_args_0": {"arg_0": json.dumps(messages), "arg_1": " 1"}}
        records.append(rec)
    (folder / f"samples_{task}_{date}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_chat_template_runs_import_their_questions(tmp_path):
    """Before: every record of a chat-template run was skipped ("no question text")."""
    write_run(tmp_path / "out" / "api__gpt-x", "api/gpt-x", D1, "arc_easy", [1, 0, 1], chat=True)
    data, report = import_results("harness", tmp_path / "out", progress=False)
    assert report["skipped"] == [] and data.n_responses == 3
    texts = dict(zip(data.question_ids, data.texts))
    assert texts["arc_easy/arc_easy-doc-1"] == "Question: arc_easy question number 1?"  # the last user turn


def test_a_flat_folder_of_two_models_runs_imports_two_models(tmp_path):
    """Before: the folder was one model (the newest results file's), half the labels overwritten."""
    flat = tmp_path / "out" / "flat"
    write_run(flat, "org/alpha", D1, "arc_easy", [1, 0, 1, 1])
    write_run(flat, "org/beta", D2, "arc_easy", [0, 0, 1, 0])
    write_run(tmp_path / "out" / "org__chat", "org/chat", D3, "arc_easy", [1, 1, 0, 0], chat=True)
    data, report = import_results("harness", tmp_path / "out", progress=False)
    got = labels_of(data)
    assert sorted(data.models) == ["org/alpha", "org/beta", "org/chat"] and len(got) == 12
    assert got[("org/alpha", "arc_easy/arc_easy-doc-1")] == 0 and got[("org/beta", "arc_easy/arc_easy-doc-3")] == 0
    assert report["per_model"]["org/beta"] == {"labels_read": 4, "labels_kept": 4, "duplicates_dropped": 0,
                                               "names": ["org/beta"], "name_from": [f"model_name in results_{D2}.json"]}
    alone, _ = import_results("harness", flat, progress=False)
    assert alone.n_models == 2


def test_a_run_whose_model_is_unknown_is_refused_with_its_file_named(tmp_path):
    flat = tmp_path / "flat"
    write_run(flat, "org/alpha", D1, "arc_easy", [1, 0])
    write_run(flat, "org/beta", D2, "arc_easy", [0, 1])
    write_run(flat, "org/ghost", D3, "arc_easy", [1, 1], results=False)  # its results file is missing
    data, report = import_results("harness", flat, progress=False)
    assert sorted(data.models) == ["org/alpha", "org/beta"]
    assert any(f"samples_arc_easy_{D3}.jsonl: which model ran it is unknown" in s for s in report["skipped"])


def test_a_re_run_keeps_the_later_label_and_says_so(tmp_path):
    write_run(tmp_path / "org__alpha", "org/alpha", D2, "arc_easy", [1, 1, 1])
    write_run(tmp_path / "old" / "org__alpha", "org/alpha", D1, "arc_easy", [0, 0, 0], model_args_only=True)
    data, report = import_results("harness", tmp_path, progress=False)
    assert set(labels_of(data).values()) == {1.0}  # the run of D2, though read from another folder
    assert report["duplicates_dropped"] == 3 and "later run" in report["duplicates_rule"]
    assert report["per_model"]["org/alpha"]["labels_read"] == 6
    assert report["per_model"]["org/alpha"]["name_from"] == [f"model_args in results_{D1}.json"]  # read first


def test_git_lfs_pointers_are_named_as_such(tmp_path):
    """Before: every line of a stub was reported as "not a JSON record"."""
    stubs = tmp_path / "org__alpha"
    stubs.mkdir()
    (stubs / f"samples_arc_easy_{D1}.jsonl").write_text(LFS.format("a" * 64))
    (stubs / f"samples_gsm8k_{D1}.jsonl").write_text(LFS.format("b" * 64))
    with pytest.raises(DataError, match=r"all 2 file\(s\) are Git LFS pointers.*git lfs pull"):
        import_results("harness", tmp_path, progress=False)
    write_run(tmp_path / "org__beta", "org/beta", D1, "arc_easy", [1, 0])
    data, report = import_results("harness", tmp_path, progress=False)
    assert data.n_models == 1 and report["lfs_pointers"] == 2
    assert all("Git LFS pointer, not the data: run `git lfs pull`" in s for s in report["skipped"])
    assert not any("not a JSON record" in s for s in report["skipped"])


def test_pyirt_amortized_ids_are_the_texts(tmp_path):
    items = ["Which planet is known as the red planet?", "What is the boiling point of water at sea level?",
             "Who wrote the novel Pride and Prejudice?"]
    (tmp_path / "amortized.jsonl").write_text(
        json.dumps({"subject_id": "llm-1", "responses": {items[0]: 1, items[1]: 0, items[2]: 1}}) + "\n"
        + json.dumps({"subject_id": "llm-2", "responses": {items[0]: 0, items[2]: 1}}) + "\n")
    data, report = import_results("pyirt", tmp_path / "amortized.jsonl", progress=False)  # detected
    assert data.n_responses == 5 and set(data.texts) == set(items) and report["notes"]
    explicit, _ = import_results("pyirt", tmp_path / "amortized.jsonl", texts_from_ids=True, progress=False)
    assert explicit.n_responses == 5
    (tmp_path / "ids.jsonl").write_text(json.dumps({"subject_id": "a", "responses": {"q1": 1, "q2": 0}}) + "\n")
    with pytest.raises(DataError, match="--texts-from-ids"):
        import_results("pyirt", tmp_path / "ids.jsonl", progress=False)


def test_helm_multiple_choice_keeps_the_options(tmp_path):
    write_helm_run(tmp_path / "runs", "openai/gpt2", [1, 0])
    run = next((tmp_path / "runs").iterdir())
    state = json.loads((run / "scenario_state.json").read_text())
    for rs in state["request_states"]:
        rs["instance"]["references"] = [{"output": {"text": t}, "tags": ["correct"] if t == "Femur" else []}
                                        for t in ("Femur", "Ulna", "Radius", "Tibia")]
    (run / "scenario_state.json").write_text(json.dumps(state))
    data, _ = import_results("helm", tmp_path / "runs", progress=False)
    text = dict(zip(data.question_ids, data.texts))["mmlu:subject=anatomy,method=multiple_choice_joint/id0"]
    assert text == "Anatomy question 0?\nA. Femur\nB. Ulna\nC. Radius\nD. Tibia"


def write_v1_details(root: Path, model: str, task: str, date: str, labels: list[float], metric: str) -> None:
    """An Open LLM Leaderboard v1 details set (details_<org>__<model>) as lighteval writes it:
    <date>/details_<task>_<date>.parquet, one record per example, columns sorted."""
    folder = root / f"details_{model.replace('/', '__')}" / date
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"example": f"Question: {task} item {i}?", "full_prompt": f"Q: warm-up\nA: x\n\nQuestion: {task} item {i}?",
             "gold": ["A"], "metrics": {metric: float(y), "acc_stderr": 0.0}, "predictions": [[-1.0, False]],
             "hashes": {"example": f"h-{task}-{i}", "full_prompt": "p"}} for i, y in enumerate(labels)]
    pq.write_table(pa.Table.from_pylist(rows), folder / f"details_{task}_{date}.parquet")


def test_open_llm_leaderboard_v1_and_v2_details(tmp_path):
    root = tmp_path / "leaderboard"
    write_v1_details(root, "org/alpha", "harness|arc:challenge|25", "2023-09-03T10-57-04.203304", [1, 0, 1], "acc_norm")
    write_v1_details(root, "org/alpha", "harness|truthfulqa:mc|0", "2023-09-03T10-57-04.203304", [0.8, 0.25], "mc2")
    write_v1_details(root, "org/beta", "harness|arc:challenge|25", "2023-10-01T08-00-00.000000", [0, 0, 1], "acc_norm")
    # v2: the harness's samples in <org>__<model> folders (here without a results file: the folder names it)
    v2 = root / "org__gamma"
    v2.mkdir(parents=True)
    recs = [harness_record("leaderboard_bbh_navigate", i, y) for i, y in enumerate([1, 0])]
    (v2 / f"samples_leaderboard_bbh_navigate_{D1}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    data, report = import_results("leaderboard", root, progress=False)
    got = labels_of(data)
    assert sorted(data.models) == ["org/alpha", "org/beta", "org/gamma"] and report["skipped"] == []
    assert got[("org/alpha", "arc:challenge/h-harness|arc:challenge|25-0")] == 1
    assert got[("org/alpha", "truthfulqa:mc/h-harness|truthfulqa:mc|0-1")] == 0.25
    assert got[("org/gamma", "leaderboard_bbh_navigate/leaderboard_bbh_navigate-doc-1")] == 0
    assert report["per_model"]["org/gamma"]["name_from"] == ["the folder name 'org__gamma'"]
    assert set(data.benchmarks) == {"arc:challenge", "truthfulqa:mc", "leaderboard_bbh_navigate"}
    assert dict(zip(data.question_ids, data.texts))["arc:challenge/h-harness|arc:challenge|25-2"] == \
        "Question: harness|arc:challenge|25 item 2?"
    assert load_data(root).n_responses == data.n_responses  # also as --data, detected


def test_lighteval_local_layout(tmp_path):
    """lighteval's own output: details/<model name>/<date>/details_<task>_<date>.parquet."""
    folder = tmp_path / "out" / "details" / "org" / "delta" / "2024-01-01T00-00-00.000000"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"example": "What is 3+3?", "metrics": {"em": 1.0}}]),
                   folder / "details_lighteval|gsm8k|5_2024-01-01T00-00-00.000000.parquet")
    data, report = import_results("lighteval", tmp_path / "out", progress=False)
    assert list(data.models) == ["org/delta"] and data.labels.tolist() == [1.0]


def test_cli_error_lines_keep_paths_whole(tmp_path):
    """A path in an error or a skipped line is never broken across lines by the terminal."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "org__alpha"
    deep.mkdir(parents=True)
    stub = deep / f"samples_arc_easy_{D1}.jsonl"
    stub.write_text(LFS.format("c" * 64))
    write_run(deep.parent / "org__beta", "org/beta", D1, "arc_easy", [1, 0])
    r = CliRunner().invoke(app, ["data", "import", "harness", str(deep.parent), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert any(str(stub) in line for line in r.output.splitlines())
    deep_missing = deep / "no-such-mapping-file-with-a-long-name.yaml"
    r = CliRunner().invoke(app, ["data", "import", "harness", str(deep.parent), "--out", str(tmp_path / "o"),
                                 "--names", str(deep_missing)])
    assert r.exit_code == 2 and any(str(deep_missing) in line for line in r.output.splitlines()), r.output
