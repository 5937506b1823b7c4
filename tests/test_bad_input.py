"""Bad input, case by case: each gets one clear line (or, from Python, a DataError, TypeError or
ValueError naming the method) that names the file, row or value and the fix, and nothing is
lost without a word. Each case: how to build the input, the command (or call), the exit code and
the words the message must hold."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import jeirt_ray as jr
from jeirt_ray.cli.main import app

from .test_importers import write_harness_model

runner = CliRunner()
N_QUESTIONS = 20


def write_dataset(folder, models=("llm-a", "llm-b", "llm-c"), n=N_QUESTIONS, bench=("math", "law")):
    """A small valid long-format dataset (CSV)."""
    folder.mkdir(parents=True, exist_ok=True)
    q = pd.DataFrame({"question_id": [f"q{i}" for i in range(n)], "benchmark": [bench[i % len(bench)] for i in range(n)],
                      "text": [f"What is question number {i} about {bench[i % len(bench)]}?" for i in range(n)]})
    rng = np.random.default_rng(0)
    r = pd.DataFrame([{"model": m, "question_id": f"q{i}", "label": float(rng.random() < 0.6)}
                      for m in models for i in range(n)])
    q.to_csv(folder / "questions.csv", index=False)
    r.to_csv(folder / "responses.csv", index=False)
    return folder


# ---- how each bad folder is made from a good one ------------------------------------------------

def _two_response_files(d):
    pd.read_csv(d / "responses.csv").head(5).to_parquet(d / "responses.parquet")


def _two_question_files(d):
    pd.read_csv(d / "questions.csv").to_csv(d / "questions.csv.gz", index=False)


def _header_only_responses(d):
    (d / "responses.csv").write_text("model,question_id,label\n")


def _empty_responses(d):
    (d / "responses.csv").write_bytes(b"")


def _latin1_questions(d):
    (d / "questions.csv").write_bytes("question_id,benchmark,text\nq0,math,Qu\xe9 es\n".encode("latin-1"))


def _blank_lines_only(d):
    (d / "questions.csv").write_text("\n\n\n")


def _garbage_parquet(d):
    (d / "responses.csv").unlink()
    (d / "responses.parquet").write_bytes(b"this is not parquet")


def _bad_label(d):
    (d / "responses.csv").write_text("model,question_id,label\nllm-a,q0,1\nllm-a,q1,yes\n")


FOLDER_CASES = [  # (id, how to break the folder, exit code, words of the one line)
    ("two-files-of-one-table", _two_response_files, 2, ["2 files of one table", "responses.parquet, responses.csv",
                                                        "keep one"]),
    ("questions-csv-beside-csv-gz", _two_question_files, 2, ["2 files of one table", "questions.csv.gz, questions.csv"]),
    ("header-only-responses", _header_only_responses, 2, ["responses.csv", "no responses", "header but no rows"]),
    ("empty-file", _empty_responses, 2, ["responses.csv", "empty file (0 bytes)"]),
    ("not-utf8", _latin1_questions, 2, ["questions.csv", "not UTF-8", "save the file as UTF-8"]),
    ("blank-lines-only", _blank_lines_only, 2, ["questions.csv", "no header row"]),
    ("garbage-parquet", _garbage_parquet, 2, ["responses.parquet", "cannot be read"]),
    ("label-not-a-number", _bad_label, 2, ["responses.csv", "row 2", "'label'", "'yes'", "not a number"]),
]


@pytest.mark.parametrize("case, breaks, code, words", FOLDER_CASES, ids=[c[0] for c in FOLDER_CASES])
def test_a_bad_folder_gets_one_line_from_data_check(tmp_path, case, breaks, code, words):
    d = write_dataset(tmp_path / "data")
    breaks(d)
    result = runner.invoke(app, ["data", "check", str(d)])
    assert result.exit_code == code, result.output
    line = " ".join(result.output.split())  # the console may wrap
    assert "Traceback" not in result.output
    for w in words:
        assert w in line, f"{case}: {w!r} not in {line!r}"


@pytest.mark.parametrize("case, breaks, code, words", FOLDER_CASES[:6], ids=[c[0] for c in FOLDER_CASES[:6]])
def test_from_python_the_same_input_raises_data_error(tmp_path, case, breaks, code, words):
    d = write_dataset(tmp_path / "data")
    breaks(d)
    with pytest.raises(jr.DataError) as e:
        jr.load_data(d)
    for w in words:
        assert w in str(e.value)


def test_a_file_or_a_missing_path_where_a_folder_is_expected(tmp_path):
    d = write_dataset(tmp_path / "data")
    result = runner.invoke(app, ["data", "check", str(d / "responses.csv")])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "is a file, not a dataset folder" in out and f"({d})" in out
    result = runner.invoke(app, ["data", "check", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such folder" in " ".join(result.output.split())
    with pytest.raises(jr.DataError, match="is a file, not a dataset folder"):
        jr.load_data(d / "questions.csv")


# ---- splits ---------------------------------------------------------------------------------------

def test_a_split_that_leaves_questions_out_is_refused_unless_asked(tmp_path, caplog):
    data = jr.load_data(write_dataset(tmp_path / "data"))
    half = pd.DataFrame({"question_id": data.question_ids[:10],
                         "split": ["train"] * 6 + ["val"] * 2 + ["test"] * 2})
    half.to_csv(tmp_path / "half.csv", index=False)
    with pytest.raises(jr.DataError, match=r"lists 10 of the 20 questions: 10 would take part in nothing; .*"
                                           r"partial_split=True \(--partial-split\)"):
        jr.prepare(data, encoder="hashing", split=tmp_path / "half.csv", progress=False)
    result = runner.invoke(app, ["evaluate", "--data", str(tmp_path / "data"), "--encoder", "hashing", "--fixed",
                                 "--methods", "majority", "--split", str(tmp_path / "half.csv")])
    assert result.exit_code == 2 and "--partial-split" in " ".join(result.output.split())
    with caplog.at_level(logging.WARNING, logger="jeirt"):
        prep = jr.prepare(data, encoder="hashing", split=tmp_path / "half.csv", partial_split=True, progress=False)
    assert (prep.split.question_part < 0).sum() == 10
    assert "leaves 10 of 20 questions out" in caplog.text
    result = runner.invoke(app, ["evaluate", "--data", str(tmp_path / "data"), "--encoder", "hashing", "--fixed",
                                 "--methods", "majority", "--split", str(tmp_path / "half.csv"), "--partial-split"])
    assert result.exit_code == 0, result.output


def test_a_split_json_of_another_dataset_is_refused_by_its_fingerprint(tmp_path):
    data = jr.load_data(write_dataset(tmp_path / "data"))
    other = jr.load_data(write_dataset(tmp_path / "other", models=("x", "y")))
    prep = jr.prepare(other, encoder="hashing", progress=False)
    prep.split.save(tmp_path / "split.json", other)
    with pytest.raises(jr.DataError, match="saved for another dataset"):
        jr.prepare(data, encoder="hashing", split=tmp_path / "split.json", progress=False)
    (tmp_path / "broken.json").write_text("{\"kind\": \"by_question\"}")
    with pytest.raises(jr.DataError, match="not a split.json that jeirt saved"):
        jr.prepare(data, encoder="hashing", split=tmp_path / "broken.json", progress=False)


# ---- a harness folder read directly ---------------------------------------------------------------

def test_skipped_lines_are_reported_when_a_harness_folder_is_the_data(tmp_path, caplog):
    folder = write_harness_model(tmp_path / "runs", "org/model-a", {"arc_easy": [1, 0, 1, 1]})
    write_harness_model(tmp_path / "runs", "org/model-b", {"arc_easy": [0, 0, 1, 1]})
    sample = next(folder.glob("samples_arc_easy_*.jsonl"))
    sample.write_text(sample.read_text() + "{not json\n")
    with caplog.at_level(logging.WARNING, logger="jeirt"):
        data = jr.load_data(tmp_path / "runs")
    assert data.n_responses == 8
    assert "1 item(s) skipped" in caplog.text and "not a JSON record" in caplog.text
    assert "jeirt data import" in caplog.text
    result = runner.invoke(app, ["data", "check", str(tmp_path / "runs")])  # on the terminal too
    assert result.exit_code == 0 and "1 item(s) skipped" in " ".join(result.output.split())


# ---- API misuse -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def space(tmp_path_factory):
    data = jr.load_data(write_dataset(tmp_path_factory.mktemp("d") / "data"))
    return jr.train(data, encoder="hashing", search=False, members=1, held_out_benchmarks=0, progress=False)


API_CASES = [  # (id, call, error type, words)
    ("route-a-string", lambda s: s.route("What is 2 + 2?"), TypeError, ["Space.route", "space.route([text])"]),
    ("predict-a-string", lambda s: s.predict("What is 2 + 2?"), TypeError, ["Space.predict"]),
    ("route-nothing", lambda s: s.route([]), ValueError, ["Space.route", "no texts"]),
    ("route-candidates-match-none", lambda s: s.route(["2 + 2?"], candidates="nothing-like-this*"), ValueError,
     ["no LLM of the space's", "nothing-like-this*"]),
    ("route-candidates-not-names", lambda s: s.route(["2 + 2?"], candidates=[1, 2]), ValueError,
     ["candidates must be LLM names or globs"]),
    ("route-size-not-a-number", lambda s: s.route(["2 + 2?"], max_params_b="7B"), ValueError,
     ["max_params_b must be a number"]),
    ("onboard-an-existing-name", lambda s: s.onboard("llm-a", ["q0"], [1]), ValueError,
     ["Space.onboard", "already has an LLM named 'llm-a'", "replace=True"]),
    ("onboard-one-id-as-a-string", lambda s: s.onboard("new", "q0", [1]), TypeError,
     ["Space.onboard", "questions must be a list"]),
    ("onboard-labels-a-string", lambda s: s.onboard("new", ["q0"], "1"), TypeError,
     ["Space.onboard", "labels must be a list"]),
    ("onboard-label-out-of-range", lambda s: s.onboard("new", ["q0", "q1"], [1, 2]), ValueError,
     ["Space.onboard", "label 1 is 2.0", "[0, 1]"]),
    ("onboard-lengths-differ", lambda s: s.onboard("new", ["q0", "q1"], [1]), ValueError,
     ["2 questions but 1 labels"]),
]


@pytest.mark.parametrize("case, call, error, words", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_misuse_names_the_method_and_the_fix(space, case, call, error, words):
    with pytest.raises(error) as e:
        call(space)
    for w in words:
        assert w in str(e.value), f"{case}: {w!r} not in {str(e.value)!r}"


def test_onboarding_an_existing_name_replaces_only_when_asked(space):
    before = space.model_vectors()[space.model_names.index("llm-a")].copy()
    new = space.onboard("llm-a", [f"q{i}" for i in range(10)], [1] * 10, replace=True)
    assert new.model_names == space.model_names
    assert not np.allclose(new.model_vectors()[new.model_names.index("llm-a")], before)
    assert np.allclose(space.model_vectors()[space.model_names.index("llm-a")], before)  # unchanged


# ---- one consistent API -------------------------------------------------------------------------

def _plain(value) -> bool:
    """Only JSON's own types, all the way down (no numpy scalars, no numpy strings)."""
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_what_a_user_receives_is_plain_python_and_survives_json(space, tmp_path):
    routes = space.route(["What is 17 times 23?", "Which law applies?"], min_p=0.0)
    assert _plain(routes) and json.loads(json.dumps(routes)) == routes
    predicted = space.predict(["What is 17 times 23?"])
    table = json.loads(predicted.to_json(orient="split"))
    assert table["columns"] == space.model_names and table["index"] == ["What is 17 times 23?"]
    assert np.allclose(table["data"], predicted.to_numpy())
    data = jr.load_data(write_dataset(tmp_path / "data", n=200))  # both labels among the test answers: a finite AUC
    results = jr.evaluate(data, encoder="hashing", search=False, methods=["jeirt", "majority", "knn"], members=1,
                          progress=False)
    assert _plain(results) and json.loads(json.dumps(results, allow_nan=False)) == results


def test_one_top_k_default_min_p_and_one_router_per_space(space):
    from typer.main import get_command

    from jeirt_ray.routing.decisions import DEFAULT_TOP_K
    from jeirt_ray.serving.schemas import RouteRequest
    assert RouteRequest(query="x").top_k == DEFAULT_TOP_K
    cli_top_k = next(o for o in get_command(app).commands["route"].params if o.name == "top_k")
    assert cli_top_k.default == DEFAULT_TOP_K
    (r,) = space.route(["What is 17 times 23?"], policy="most_likely")
    assert len(r["scores"]) == min(DEFAULT_TOP_K, len(space.model_names))
    assert space.router() is space.router()
    best = r["p_correct"]
    with pytest.raises(ValueError, match="min_p"):
        space.route(["What is 17 times 23?"], min_p=(best + 1) / 2)
    (r2,) = space.route(["What is 17 times 23?"], policy="most_likely", min_p=best)
    assert r2["chosen"] == r["chosen"] and all(s["p_correct"] >= best for s in r2["scores"])


def test_train_and_evaluate_seed_their_members_alike(tmp_path):
    data = jr.load_data(write_dataset(tmp_path / "data"))
    space = jr.train(data, encoder="hashing", search=False, members=2, seed=1, held_out_benchmarks=0, progress=False)
    assert [m["seed"] for m in space.metadata["members"]] == [100, 101]  # as jr.evaluate's JE-IRT: 100 * seed + i


def test_everything_a_public_function_returns_is_exported():
    assert jr.Prepared.__name__ == "Prepared" and jr.RouteDecision.__name__ == "RouteDecision"
    assert {"Prepared", "RouteDecision", "Imported", "Space", "Registry"} <= set(jr.__all__)


def test_old_cli_names_still_work_hidden():
    from typer.main import get_command
    encode = get_command(app).commands["encode"]
    hidden = {o.name for o in encode.params if getattr(o, "hidden", False)}
    assert "ray" in hidden
    report = get_command(app).commands["report"]
    assert {o.name for o in report.params if getattr(o, "hidden", False)} == {"skip"}
    assert "--studies" in [d for o in report.params for d in o.opts]


@pytest.mark.parametrize("responses, words", [
    ([("a", "q0", 2.0)], ["responses frame", "row 1", "label"]),
    ([("a", "q0", -1.0)], ["responses frame", "row 1", "label"]),
    ([("a", "q0", 1.0), ("a", "q0", 0.0)], ["duplicate (model, question_id) pair", "row 2"]),
    ([("a", "q9", 1.0)], ["not in the questions file", "q9"]),
])
def test_frames_are_checked_as_files_are(responses, words):
    q = pd.DataFrame({"question_id": ["q0", "q1"], "benchmark": ["m", "m"], "text": ["one?", "two?"]})
    r = pd.DataFrame(responses, columns=["model", "question_id", "label"])
    with pytest.raises(jr.DataError) as e:
        jr.ResponseData.from_frames(q, r, name="frames")
    assert all(w in str(e.value) for w in words), str(e.value)


def test_train_names_what_it_takes_when_given_a_frame():
    with pytest.raises(TypeError, match="ResponseData.from_frames"):
        jr.train(pd.DataFrame({"a": [1]}), search=False)


@pytest.mark.parametrize("args, words", [
    (["--members", "0"], ["--members", "greater than or equal to 1"]),
    (["--promote", "champion"], ["--promote needs --register"]),
    (["--trials", "4"], ["--trials and --criterion are search settings"]),
    (["--out", "FILE"], ["name a folder to save the space in"]),
    (["--prices", "MISSING"], ["no such price table file"]),
], ids=["members-0", "promote-alone", "search-setting-under-fixed", "out-a-file", "prices-missing"])
def test_train_checks_every_argument_before_training(tmp_path, args, words):
    """Each is refused at once (exit 2, one line), not after minutes of training."""
    write_dataset(tmp_path / "d")
    (tmp_path / "a-file").write_text("x")
    args = [a.replace("FILE", str(tmp_path / "a-file")).replace("MISSING", str(tmp_path / "no.csv")) for a in args]
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--fixed", "--encoder", "hashing", *args])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and all(w in out for w in words), r.output
    assert not (tmp_path / ".jeirt").exists()
