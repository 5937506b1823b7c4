
import numpy as np
import pandas as pd
import pytest

from jeirt_ray.data import (DataError, Split, load_data, load_embedllm, load_long_format,
                            split_by_model, split_by_question, split_leave_benchmark_out)

from .conftest import shared_dataset


def write(d, questions, responses, fmt="csv"):
    d.mkdir(parents=True, exist_ok=True)
    q, r = pd.DataFrame(questions), pd.DataFrame(responses)
    if fmt == "parquet":
        q.to_parquet(d / "questions.parquet")
        r.to_parquet(d / "responses.parquet")
    elif fmt == "csv.gz":
        q.to_csv(d / "questions.csv.gz", index=False)
        r.to_csv(d / "responses.csv.gz", index=False)
    else:
        q.to_csv(d / "questions.csv", index=False)
        r.to_csv(d / "responses.csv", index=False)
    return d


QS = {"question_id": ["a", "b", "c"], "benchmark": ["x", "x", "y"], "text": ["what is 1+1", "capital of France", "sort a list"]}
RS = {"model": ["m1", "m1", "m2", "m2"], "question_id": ["a", "b", "a", "c"], "label": [1, 0, 0.5, 1]}


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_long_format_roundtrip(tmp_path, fmt):
    d = load_long_format(write(tmp_path / fmt, QS, RS, fmt))
    assert d.n_models == 2 and d.n_questions == 3 and d.n_responses == 4
    assert list(d.models) == ["m1", "m2"]
    # sparse: m1 never answered c, m2 never answered b; nothing is filled in
    mat = d.label_matrix()
    assert np.isnan(mat[2, 0]) and np.isnan(mat[1, 1]) and mat[0, 1] == 0.5
    again = load_long_format(d.save(tmp_path / "saved"))
    assert again.fingerprint() == d.fingerprint()


def bad(tmp_path, questions=QS, responses=RS):
    with pytest.raises(DataError) as e:
        load_long_format(write(tmp_path, questions, responses))
    return str(e.value)


def test_missing_column(tmp_path):
    msg = bad(tmp_path, responses={"model": ["m1"], "question_id": ["a"]})
    assert "responses.csv" in msg and "missing column" in msg and "label" in msg


def test_label_out_of_range(tmp_path):
    msg = bad(tmp_path, responses={**RS, "label": [1, 0, 1.5, 1]})
    assert "responses.csv" in msg and "row 3" in msg and "'label'" in msg and "1.5" in msg and "[0, 1]" in msg


def test_label_nan(tmp_path):
    msg = bad(tmp_path, responses={**RS, "label": [1, "", 0, 1]})
    assert "row 2" in msg and "'label'" in msg and "not a number" in msg


def test_label_text(tmp_path):
    msg = bad(tmp_path, responses={**RS, "label": [1, 0, "yes", 1]})
    assert "row 3" in msg and "'yes'" in msg


def test_unknown_question(tmp_path):
    msg = bad(tmp_path, responses={**RS, "question_id": ["a", "b", "zzz", "c"]})
    assert "row 3" in msg and "'question_id'" in msg and "zzz" in msg and "not in the questions file" in msg


def test_empty_text(tmp_path):
    msg = bad(tmp_path, questions={**QS, "text": ["what is 1+1", "  ", "sort"]})
    assert "questions.csv" in msg and "row 2" in msg and "'text'" in msg and "empty" in msg


def test_duplicate_pair(tmp_path):
    msg = bad(tmp_path, responses={"model": ["m1", "m2", "m1"], "question_id": ["a", "a", "a"], "label": [1, 0, 1]})
    assert "row 3" in msg and "duplicate" in msg and "m1 / a" in msg and "first seen at row 1" in msg


def test_duplicate_question_id(tmp_path):
    msg = bad(tmp_path, questions={**QS, "question_id": ["a", "b", "a"]})
    assert "row 3" in msg and "duplicate question_id" in msg


def test_missing_file(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(DataError, match="no questions.parquet"):
        load_long_format(tmp_path / "d")


def embedllm_files(d, dup_label=1):
    cols = ["prompt_id", "prompt", "model_id", "model_name", "label", "category_id", "category"]
    train = [[0, "What is 2+2?", 0, "llama", 1, 3, "math"], [1, "Capital of Peru?", 0, "llama", 0, 1, "geo"],
             [0, "What is 2+2?", 1, "mistral", 0, 3, "math"]]
    val = [[1, "Capital of Peru?", 1, "mistral", 1, 1, "geo"]]
    test = [[0, "What is 2+2?", 0, "llama", dup_label, 3, "math"]]  # a duplicated (model, prompt) pair
    d.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("val", val), ("test", test)):
        pd.DataFrame(rows, columns=cols).to_csv(d / f"{name}.csv", index=False)
    return d


@pytest.mark.parametrize("rule,expected", [("mean", 0.5), ("first", 1.0), ("last", 0.0), ("max", 1.0)])
def test_embedllm_duplicates(tmp_path, rule, expected):
    d = load_embedllm(embedllm_files(tmp_path, dup_label=0), duplicates=rule)
    assert d.n_models == 2 and d.n_questions == 2 and d.n_responses == 4
    mat = d.label_matrix()
    q = list(d.question_ids).index("0")
    assert mat[q, list(d.models).index("llama")] == expected
    assert set(d.benchmarks) == {"math", "geo"}


def test_embedllm_duplicate_error(tmp_path):
    with pytest.raises(DataError, match=r"test.csv, row 1.*duplicate \(model_name, prompt_id\)"):
        load_embedllm(embedllm_files(tmp_path), duplicates="error")


def test_load_data_detects_embedllm(tmp_path):
    assert load_data(embedllm_files(tmp_path)).name == "embedllm"


def test_splits(synthetic, tmp_path):
    s = split_by_question(synthetic, seed=3)
    counts = np.bincount(s.question_part, minlength=3) / synthetic.n_questions
    assert np.allclose(counts, [0.8, 0.1, 0.1], atol=0.01)
    tr, va, te = s.masks(synthetic)
    assert not (tr & te).any() and (tr | va | te).all()
    # no test question is seen in training
    assert not set(synthetic.q_idx[tr]) & set(synthetic.q_idx[te])
    assert (split_by_question(synthetic, seed=3).question_part == s.question_part).all()
    assert not (split_by_question(synthetic, seed=4).question_part == s.question_part).all()
    s.save(tmp_path / "split.json", synthetic)
    assert (Split.load(tmp_path / "split.json", synthetic).question_part == s.question_part).all()

    h = split_by_model(synthetic, n_heldout=3, seed=0)
    tr, va, te = h.masks(synthetic)
    held = np.isin(synthetic.models[synthetic.m_idx], h.heldout_models)
    assert len(h.heldout_models) == 3 and not (held & (tr | va | te)).any()

    b = split_leave_benchmark_out(synthetic, "arithmetic")
    assert set(synthetic.benchmarks[b.questions(2)]) == {"arithmetic"}
    assert "arithmetic" not in set(synthetic.benchmarks[b.questions(0)])
    with pytest.raises(ValueError, match="unknown benchmark"):
        split_leave_benchmark_out(synthetic, "nope")


@pytest.mark.real_data
def test_shared_theoremqa_loads():
    d = load_data(shared_dataset("theoremqa"))
    assert d.n_models == 18 and d.n_questions == 800 and d.n_responses == 14165
    assert ((d.labels >= 0) & (d.labels <= 1)).all()
