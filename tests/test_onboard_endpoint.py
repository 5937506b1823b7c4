"""Adaptive onboarding and onboarding from an endpoint: the answer key's grading rules, the
question planner, and the whole flow against a loopback OpenAI-compatible server that replays
recorded answers (with planted faults), then the same on mmlu_pro's four recorded LLMs."""

import gzip
import json
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from jeirt_ray.api.endpoint import EndpointError
from jeirt_ray.api.onboard_endpoint import OnboardingStopped, onboard_endpoint
from jeirt_ray.api.space import Space
from jeirt_ray.data import DataError
from jeirt_ray.data.answer_key import AnswerKey, extract_letter, extract_number, options_in
from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.adaptive import plan
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.api.replay import ReplayServer

from .conftest import registry_env, shared_dataset

LLM = "newcomer"


# ---- grading ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, strict, expected", [
    ("Let us think. The answer is (C).", False, "C"),
    ("so the answer is D", False, "D"),
    ("Options weighed.\nAnswer: B", False, "B"),
    ("Between A and J, I pick E here", False, "E"),  # the last letter standing alone
    ("I cannot tell.", False, "I"),  # upstream reads the pronoun as option I
    ("no idea, sorry", False, None),
    ("Answer: B", True, None),  # the strict rule reads "answer is (X)" only
    ("the answer is (H)", True, "H"),
])
def test_letter_extraction_follows_mmlu_pro(text, strict, expected):
    assert extract_letter(text, strict=strict) == expected


def test_answer_key_grades_each_kind(tmp_path):
    path = tmp_path / "key.csv"
    pd.DataFrame({"question_id": ["q1", "q2", "q3", "q4"], "answer": ["c", "1,234.5", "Paris", "B"],
                  "kind": ["letter", "number", "exact", None]}).to_csv(path, index=False)
    key = AnswerKey.read(path, default_kind="letter_strict")
    assert key.grade("q1", "the answer is (C)").label == 1.0
    assert key.grade("q2", "Adding up, the answer is 1234.50.").label == 1.0
    assert extract_number("x = 3, then 7 and finally -2.5") == -2.5
    assert key.grade("q2", "the answer is 1235").label == 0.0
    assert key.grade("q3", "Thinking...\nThe answer is: **paris**.").label == 1.0
    assert key.grade("q4", "Answer: B").label == 0.0  # kind from the default: letter_strict
    assert key.grade("q1", "no idea").extracted is None


@pytest.mark.parametrize("rows, message", [
    ({"question_id": ["q1", "q2"], "answer": ["A", "Z"]}, "row 2 (line 3), column 'answer', value 'Z'"),
    ({"question_id": ["q1", "q1"], "answer": ["A", "B"]}, "row 2 (line 3), column 'question_id'"),
    ({"question_id": ["q1"], "answer": ["A"], "kind": ["essay"]}, "column 'kind', value 'essay'"),
    ({"question_id": ["q1"], "answer": ["ten"], "kind": ["number"]}, "value 'ten'"),
    ({"id": ["q1"], "answer": ["A"]}, "missing ['question_id']"),
    ({"question_id": ["q1"], "answer": ["nan"], "kind": ["number"]}, "value 'nan'"),
    ({"question_id": ["q1"], "answer": ["inf"], "kind": ["number"]}, "value 'inf'"),
    ({"question_id": ["q1", "q2"], "answer": ["A", "F"], "n_options": [4, 4]},
     "row 2 (line 3), column 'answer', value 'F': the letter is beyond the question's 4 options (A-D)"),
    ({"question_id": ["q1"], "answer": ["A"], "n_options": [1.5]}, "column 'n_options', value '1.5'"),
])
def test_bad_answer_keys_name_file_row_column_and_value(tmp_path, rows, message):
    path = tmp_path / "key.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"key\.csv") as e:
        AnswerKey.read(path)
    assert message in str(e.value)


def test_letters_beyond_the_options_a_question_lists_are_refused(tmp_path):
    assert options_in("Which?\nA. one\nB. two\n(C) three\nI. not an option after a gap") == 3
    assert options_in("What is 2 + 2?") == 0
    path = tmp_path / "key.csv"
    pd.DataFrame({"question_id": ["q1", "q2", "q3"], "answer": ["B", "E", "4"],
                  "kind": ["letter", "letter", "number"]}).to_csv(path, index=False)
    key = AnswerKey.read(path)
    texts = {"q1": "Which?\nA. x\nB. y", "q2": "Which?\nA. x\nB. y\nC. z", "q3": "2 + 2?"}
    with pytest.raises(DataError, match=r"key\.csv: 1 letter answer\(s\) beyond .* q2 \(answer E, options A-C\)"):
        key.check_options(texts)
    key.check_options({**texts, "q2": "Which?\nA. x\nB. y\nC. z\nD. w\nE. v"})


@pytest.mark.parametrize("rows, message", [
    ({"question_id": ["q1", "q2"], "label": [1, "yes"]}, "row 2 (line 3), column 'label', value 'yes'"),
    ({"question_id": ["q1", "q2"], "label": [1, 2]}, "row 2 (line 3), column 'label', value '2'"),
    ({"question_id": ["q1", "q2"], "label": [1, None]}, "row 2 (line 3), column 'label'"),
    ({"question_id": ["q1", "q1"], "label": [1, 0]}, "given twice"),
    ({"question_id": ["q1"], "correct": [1]}, "missing ['label']"),
])
def test_bad_graded_answers_name_file_row_column_and_value(tmp_path, rows, message):
    from jeirt_ray.data.answer_key import read_graded
    path = tmp_path / "graded.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"graded\.csv") as e:
        read_graded(path)
    assert message in str(e.value)
    pd.DataFrame({"question_id": ["q1", "q2"], "label": [1, 0.5]}).to_csv(path, index=False)
    assert read_graded(path) == {"q1": 1.0, "q2": 0.5}


# ---- a small space and a replayable LLM -------------------------------------------------------
@pytest.fixture(scope="module")
def world(synthetic, tmp_path_factory):
    """A space trained on the synthetic data (hashing encoder), saved and registered; a new LLM
    behind a replay folder whose recorded answers are right exactly where its labels say (its
    labels drawn from a vector of the space's kind); and the answer key."""
    root = tmp_path_factory.mktemp("onboard")
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    space = Space.from_core(train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=40), members=1,
                                        progress=False))
    folder = root / "space"
    space.save(folder)
    rng = np.random.default_rng(0)
    gold = rng.choice(list("ABCDEFGHIJ"), size=synthetic.n_questions)
    p_true = space.predict_proba(prep.X)[:, 3]  # the new LLM answers like LLM 3 of the space
    truth = (rng.random(synthetic.n_questions) < p_true).astype(float)
    wrong = np.array([chr(ord("A") + (ord(g) - ord("A") + 1) % 10) for g in gold])
    data = root / "replay"
    (data / "outputs").mkdir(parents=True)
    pd.DataFrame({"question_id": synthetic.question_ids, "benchmark": synthetic.benchmarks,
                  "text": synthetic.texts}).to_csv(data / "questions.csv", index=False)
    with gzip.open(data / "outputs" / f"{LLM}.jsonl.gz", "wt") as f:
        for q, g, w, y in zip(synthetic.question_ids, gold, wrong, truth):
            f.write(json.dumps({"question_id": q, "output": f"Some reasoning. The answer is ({g if y else w})."}) + "\n")
    pd.DataFrame({"question_id": synthetic.question_ids, "answer": gold}).to_csv(root / "key.csv", index=False)
    labels = dict(zip(synthetic.question_ids.tolist(), truth.tolist()))
    with registry_env(root / "home"):
        from jeirt_ray.tracking.registry import SpaceRegistry
        reg = SpaceRegistry()
        reg.promote("onb", reg.register(space, "onb"), "champion")
        yield {"space": space, "folder": folder, "data": data, "key": root / "key.csv", "labels": labels,
               "reg": reg, "root": root, "p_true": p_true, "prep": prep}


def _run(world, server, tmp_path, **kw):
    args = dict(answer_key=world["key"], space="models:/onb@champion", max_answers=20, concurrency=4,
                answer_log=tmp_path / "answers.jsonl", timeout_s=10, backoff_s=0.01, progress=False)
    return onboard_endpoint(server.url, LLM, **{**args, **kw})


# ---- the planner -------------------------------------------------------------------------------
def test_plan_asks_new_questions_within_the_benchmarks_and_stops_on_a_wide_target(world):
    space = world["space"]
    answered = {q: world["labels"][q] for q in space.question_ids[:5]}
    p = plan(space, LLM, answered, 7, benchmarks=["history"])
    ids = [q["question_id"] for q in p.questions]
    assert len(set(ids)) == 7 and not set(ids) & set(answered)
    assert {q["benchmark"] for q in p.questions} == {"history"} and set(p.predicted) >= {"overall", "history"}
    assert all(0 <= r["low"] <= r["high"] <= 1 for r in p.predicted.values())
    assert not p.stop and plan(space, LLM, answered, 3, target_width=1.0).stop
    with pytest.raises(KeyError, match="unknown benchmark"):
        plan(space, LLM, answered, 3, benchmarks=["astrology"])
    with pytest.raises(KeyError, match="not questions of this space"):
        plan(space, LLM, {"nope": 1.0}, 3)


def test_each_strategy_takes_its_random_share_from_one_seeded_order_which_carries_the_correction(world):
    """`random` takes the next questions of one seeded order, `adaptive` none of them, `mixed`
    asks adaptively first and then in that order; the answers to the order's prefix are counted
    as random draws (and move the estimate off the space's own prediction), answers elsewhere are
    not; the purpose picks the strategy."""
    from jeirt_ray.model.estimate import sample_order
    from jeirt_ray.model.onboarding_defaults import MIXED_ADAPTIVE_FIRST, PURPOSE_STRATEGY, random_share
    space, labels = world["space"], world["labels"]
    ids = np.asarray(space.question_ids)
    order = ids[sample_order(np.asarray(space.question_benchmarks), 0)].tolist()
    assert [q["question_id"] for q in plan(space, LLM, {}, 10, strategy="random").questions] == order[:10]
    assert all(q["gain"] is None for q in plan(space, LLM, {}, 10, strategy="random").questions)
    assert all(q["gain"] is not None for q in plan(space, LLM, {}, 10, strategy="adaptive").questions)
    early = {q: labels[q] for q in order[-(MIXED_ADAPTIVE_FIRST - 1):]}
    late = early | {order[0]: labels[order[0]]}
    assert all(q["gain"] is not None for q in plan(space, LLM, early, 10, strategy="mixed").questions)
    got = [q["question_id"] for q in plan(space, LLM, late, 10, strategy="mixed").questions]
    assert got == [q for q in order if q not in late][:10]
    answered = {q: labels[q] for q in order[:40]} | {q: labels[q] for q in ids[:20].tolist()}
    p = plan(space, LLM, answered, 0, strategy="random").predicted["overall"]
    assert p["random_answers"] >= 40 and 0 < p["correction_weight"] < 1 and p["accuracy"] != p["model_accuracy"]
    off_order = plan(space, LLM, {q: labels[q] for q in order[1:41]}, 0).predicted["overall"]
    assert off_order["random_answers"] == 0 and off_order["correction_weight"] == 0
    # `weighted` draws its own order (items repeat in it; each is asked once), whose answered
    # prefix is its draws (a repeat counts again, as its probability says)
    weighted = [q["question_id"] for q in plan(space, LLM, {}, 40, strategy="weighted").questions]
    assert len(set(weighted)) == 40 and weighted[:10] != order[:10]
    p = plan(space, LLM, {q: labels[q] for q in weighted}, 0, strategy="weighted").predicted["overall"]
    assert p["random_answers"] >= 40 and 0 < p["correction_weight"] < 1
    for purpose, strategy in PURPOSE_STRATEGY.items():
        got = plan(space, LLM, {}, 10, purpose=purpose).questions
        assert sum(q["gain"] is None for q in got) == round(10 * random_share(strategy, 0)), purpose
    with pytest.raises(ValueError, match="purpose must be one of route, estimate, both"):
        plan(space, LLM, {}, 10, purpose="fun")


def test_adaptive_questions_narrow_the_interval_faster_than_random_ones(world):
    """What the planner optimises, checked: after the same number of answers (asked in rounds
    of 6, the vector refitted between rounds), the predicted accuracy's interval is narrower for
    adaptive questions than for random ones, on each of 3 seeds."""
    space, labels = world["space"], world["labels"]
    widths = {"adaptive": [], "random": []}
    for seed in range(3):
        for strategy in widths:
            answered: dict[str, float] = {}
            for r in range(5):
                nxt = plan(space, LLM, answered, 6, strategy=strategy, seed=seed * 100 + r).questions
                answered |= {q["question_id"]: labels[q["question_id"]] for q in nxt}
            widths[strategy].append(plan(space, LLM, answered, 0, seed=seed).predicted["overall"]["vector_width"])
    assert all(a < r for a, r in zip(widths["adaptive"], widths["random"])), widths


def test_intervals_add_the_spaces_own_error_which_answers_do_not_narrow(world):
    """The space measured its error on an LLM's accuracy on validation when it was trained; the
    reported intervals hold it on top of the vector's, and a space without it reports the
    vector's and the unanswered questions' coin flips alone."""
    space, labels = world["space"], world["labels"]
    error = space.metadata["accuracy_error"]
    assert error["llms"] == world["prep"].data.n_models and set(error["groups"]) <= set(world["prep"].data.benchmarks)
    answered = {q: labels[q] for q in space.question_ids[:200]}
    with_error = plan(space, LLM, answered, 0).predicted["overall"]
    assert with_error["high"] - with_error["low"] > with_error["vector_width"] > 0
    space.metadata["accuracy_error"] = {"overall": None, "groups": {}}
    try:
        alone = plan(space, LLM, answered, 0).predicted["overall"]
    finally:
        space.metadata["accuracy_error"] = error
    # without it: the vector's part and the unanswered questions' own coin flips (the accuracy is
    # that of the space's questions), narrower than with the space's error
    assert alone["vector_width"] < alone["high"] - alone["low"] < with_error["high"] - with_error["low"]
    assert alone["vector_width"] == pytest.approx(with_error["vector_width"])


class _ConstantSpace:
    """P(correct) = 0.6 for every LLM and question."""

    def predict_proba(self, x):
        return np.full((len(x), 40), 0.6)


def test_space_error_recovers_a_planted_error_on_the_accuracy():
    """40 LLMs whose true accuracy is 0.6 + N(0, 0.05), 400 answers each, predicted 0.6 for all:
    the error found is the planted one (its root mean square over these 40), once the answers' own
    binomial noise (0.024 each) is taken out."""
    from jeirt_ray.model.adaptive import space_error
    rng = np.random.default_rng(0)
    truth = 0.6 + rng.normal(0, 0.05, 40)
    q = np.tile(np.arange(400), 40)
    m = np.repeat(np.arange(40), 400)
    y = (rng.random(len(q)) < truth[m]).astype(float)
    groups = np.where(np.arange(400) < 200, "a", "b")
    error = space_error(_ConstantSpace(), np.zeros((400, 3)), q, m, y, groups)
    assert error["llms"] == 40 and error["answers"] == 16000
    planted = float(np.sqrt(np.mean((truth - 0.6) ** 2)))
    assert error["overall"] == pytest.approx(planted, abs=0.006) and set(error["groups"]) == {"a", "b"}
    assert all(v == pytest.approx(planted, abs=0.012) for v in error["groups"].values())
    none = space_error(_ConstantSpace(), np.zeros((400, 3)), q, m, (rng.random(len(q)) < 0.6).astype(float))
    assert none["overall"] < 0.015  # no planted error: (nearly) nothing left once the noise is out


# ---- from an endpoint --------------------------------------------------------------------------
def test_onboarding_from_an_endpoint_retries_grades_and_registers(world, tmp_path):
    reg = world["reg"]
    before = len(reg.versions("onb"))
    with ReplayServer(world["data"]) as server:
        server.fail(429, 3)
        server.fail(500, 2)
        server.mangle = {world["space"].question_ids[i] for i in range(0, 600, 2)}
        report = _run(world, server, tmp_path)
        asked = [q for _, q in server.requests]
    assert report["graded"] == 20 and report["failed"] == {} and len(set(asked)) == 20
    mangled = [q for q in asked if q in server.mangle]
    assert report["no_answer"] == len(mangled)  # no letter to read: counted, and graded wrong
    assert report["correct"] == sum(world["labels"][q] for q in asked if q not in server.mangle)
    assert report["version"] == before + 1 and len(reg.versions("onb")) == before + 1
    new = reg.load(f"models:/onb/{report['version']}")
    assert LLM in new.model_names and new.metadata["onboarded"][LLM]["graded"] == 20
    overall = report["predicted"]["overall"]
    assert 0 <= overall["low"] <= overall["high"] <= 1 and report["tokens"]["input"] > 0


def test_the_replay_server_streams_when_asked_as_openai_does(world):
    """The OpenAI SDK's stream from `jeirt replay` (it used to yield nothing): the recorded answer
    in chunks, then the usage chunk asked for."""
    import openai
    with ReplayServer(world["data"]) as server:
        text, qid = next((t, q) for t, q in server.by_text.items() if server.outputs[LLM].get(q))
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        chunks = list(client.chat.completions.create(model=LLM, messages=[{"role": "user", "content": text}],
                                                     stream=True, stream_options={"include_usage": True}))
        whole = client.chat.completions.create(model=LLM, messages=[{"role": "user", "content": text}])
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed and streamed == whole.choices[0].message.content == server.outputs[LLM][qid] and len(chunks) > 4
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_a_failing_endpoint_registers_nothing_and_the_rerun_resumes(world, tmp_path):
    reg = world["reg"]
    before = len(reg.versions("onb"))
    server = ReplayServer(world["data"]).start()
    try:
        server.fail(503, 1000)  # down for good: every retry fails
        with pytest.raises(OnboardingStopped, match=r"HTTP 503.*0 of 20 answers graded.*nothing was registered"):
            _run(world, server, tmp_path, retries=1, max_failures=4)
        server.faults.clear()
        first = _run(world, server, tmp_path, max_answers=8, register=False)  # 8 answers reach the log
        port = server.port
        server.stop()  # now the connection is refused
        with pytest.raises(OnboardingStopped, match=r"connection failed.*8 of 20 answers graded"):
            _run(world, server, tmp_path, retries=1, max_failures=4)
        assert len(reg.versions("onb")) == before and first["version"] is None
        server = ReplayServer(world["data"], port=port).start()
        report = _run(world, server, tmp_path)
        assert report["resumed"] == 8 and report["graded"] == 20 and len(server.requests) == 12
        assert len(reg.versions("onb")) == before + 1
    finally:
        server.stop()


def test_a_bad_key_stops_at_once_and_timeouts_are_counted(world, tmp_path, monkeypatch):
    with ReplayServer(world["data"], api_key="sk-secret-123456") as server:
        with pytest.raises(EndpointError, match="--api-key-env") as e:
            _run(world, server, tmp_path)
        assert "sk-secret" not in str(e.value)
        monkeypatch.setenv("LLM_KEY", "sk-secret-123456")
        assert _run(world, server, tmp_path, api_key_env="LLM_KEY", max_answers=4, register=False)["graded"] == 4
    with ReplayServer(world["data"]) as server:
        server.delay_s = 1.0
        with pytest.raises(OnboardingStopped, match="no whole answer within"):
            _run(world, server, tmp_path / "slow", timeout_s=0.2, retries=0, max_failures=2)


def test_a_usd_cap_or_a_narrow_enough_interval_ends_the_run_early(world, tmp_path):
    from jeirt_ray.model.onboarding_defaults import DEFAULT_PURPOSE, PURPOSE_STRATEGY
    from jeirt_ray.routing.prices import question_costs_of
    prices = (2000.0, 4000.0)
    costs = question_costs_of(world["space"], prices)
    max_usd = 3 * float(np.median(list(costs.values())))
    with ReplayServer(world["data"]) as server:
        # adaptive questions are chosen per dollar; a random draw is taken whatever it costs, or not at all
        r = _run(world, server, tmp_path / "usd", price_usd_per_mtok=prices, max_usd=max_usd, register=False,
                 strategy="adaptive")
        assert r["stop_reason"] == "max_usd" and 3 <= r["graded"] < 20
        assert r["estimated_cost_usd"] <= max_usd
        r = _run(world, server, tmp_path / "usd-mixed", price_usd_per_mtok=prices, max_usd=max_usd, register=False)
        assert r["stop_reason"] == "max_usd" and 1 <= r["graded"] < 20
        assert r["strategy"] == PURPOSE_STRATEGY[DEFAULT_PURPOSE] and r["purpose"] == DEFAULT_PURPOSE
        assert r["estimated_cost_usd"] <= max_usd and r["cost_usd"] > 0
        new = r["new_space"]  # keeps what it was onboarded at, and how long its answers ran (the server's count)
        assert new.metadata["onboarded"][LLM]["price_usd_per_mtok"] == list(prices)
        answer = len("Some reasoning. The answer is (A).") // 4
        assert new.metadata["answer_tokens"]["per_llm"][new.model_names.index(LLM)] == pytest.approx(answer)
        r = _run(world, server, tmp_path / "wide", target_width=1.0, batch=4, register=False)
        assert r["stop_reason"] == "interval" and r["graded"] == 4  # one batch, then the interval is narrow enough
    p = world["space"].plan(LLM, {}, 50, price_usd_per_mtok=prices, max_usd=max_usd, purpose="route")
    assert sum(q["cost_usd"] for q in p["questions"]) <= max_usd and len(p["questions"]) >= 3


def test_cli_onboards_from_an_endpoint_and_plans(world, tmp_path):
    from jeirt_ray.cli.main import app
    runner = CliRunner()
    with ReplayServer(world["data"]) as server:
        r = runner.invoke(app, ["onboard", "--endpoint", server.url, "--model", LLM, "--answers", str(world["key"]),
                                "--space", str(world["folder"]), "--max-answers", "6", "--no-register", "--json",
                                "--log", str(tmp_path / "a.jsonl"), "--price-in", "1", "--price-out", "2"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    assert report["graded"] == 6 and report["cost_usd"] > 0 and report["version"] is None
    assert report["answer_key"] == {"questions": len(world["space"].question_ids), "not_in_space": 0,
                                    "space_questions_not_in_key": 0}
    partial = tmp_path / "partial.csv"
    key = pd.read_csv(world["key"]).iloc[10:]
    pd.concat([key, pd.DataFrame({"question_id": ["ghost-1", "ghost-2"], "answer": ["A", "B"]})]).to_csv(partial,
                                                                                                     index=False)
    with ReplayServer(world["data"]) as server:
        r = runner.invoke(app, ["onboard", "--endpoint", server.url, "--model", LLM, "--answers", str(partial),
                                "--space", str(world["folder"]), "--budget", "4", "--no-register",
                                "--log", str(tmp_path / "b.jsonl")])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "2 of its" in said and "not in the space (ignored); 10 of the space's questions are not in the key" in said
    assert "--budget is now --max-answers" in said  # the old spelling works, and says so
    r = runner.invoke(app, ["onboard", "plan", "--model", LLM, "--space", str(world["folder"]), "-k", "4", "--json",
                            "--price-in", "3", "--price-out", "15"])
    assert r.exit_code == 0, r.output
    planned = json.loads(r.output)["questions"]
    assert len(planned) == 4 and all(q["cost_usd"] > 0 for q in planned)
    r = runner.invoke(app, ["onboard", "plan", "--model", LLM, "--space", str(world["folder"]), "--budget-usd", "1"])
    assert r.exit_code == 2 and "--budget-usd is now --max-usd" in r.output and "--price-in" in r.output
    r = runner.invoke(app, ["onboard", "plan", "--model", LLM, "--space", str(world["folder"]), "--price-in", "3"])
    assert r.exit_code == 2 and "give both --price-in and --price-out" in r.output
    graded = tmp_path / "graded.csv"
    graded.write_text(f"question_id,label\n{world['space'].question_ids[0]},1\n{world['space'].question_ids[0]},0\n")
    r = runner.invoke(app, ["onboard", "plan", "--model", LLM, "--space", str(world["folder"]), "--answered", str(graded)])
    assert r.exit_code != 0 and "graded.csv" in r.output and "given twice" in r.output
    r = runner.invoke(app, ["onboard", "--model", LLM])
    assert r.exit_code == 2 and "--endpoint" in r.output
    for url in ("127.0.0.1:8001/v1", "ftp://example.com/v1", "http:///v1", "http://h:port/v1"):
        started = time.perf_counter()
        r = runner.invoke(app, ["onboard", "--endpoint", url, "--model", LLM, "--answers", str(world["key"]),
                                "--space", str(world["folder"]), "--no-register", "--log", str(tmp_path / "c.jsonl")])
        assert r.exit_code == 2 and "not an http:// or https:// URL with a host" in r.output, (url, r.output)
        assert time.perf_counter() - started < 5 and not (tmp_path / "c.jsonl").exists()


# ---- real recorded answers ---------------------------------------------------------------------
RECORDED = {"Phi-3-mini-4k-instruct": "letter_strict", "DeepSeek-V2": "letter_strict",
            "gemini-1.5-flash-002": "letter", "Meta-Llama-3_1-70B-Instruct": "letter"}


def test_replayed_real_llms_are_graded_as_the_dataset_labels_say(tmp_path):
    """mmlu_pro's four recorded LLMs: a space of 1,500 questions trained without them, each
    onboarded through the replay server from 30 adaptive questions; every grade matches the
    dataset's label (with the extraction rule its run was graded by)."""
    folder = shared_dataset("mmlu_pro")
    from jeirt_ray.data import load_data
    from jeirt_ray.data.splits import split_by_question
    full = load_data(folder)
    keep = np.isin(full.q_idx, np.arange(1500))
    import dataclasses
    data = dataclasses.replace(full, question_ids=full.question_ids[:1500], benchmarks=full.benchmarks[:1500],
                               texts=full.texts[:1500], q_idx=full.q_idx[keep], m_idx=full.m_idx[keep],
                               labels=full.labels[keep])
    split = split_by_question(data, 0)
    split.heldout_models = list(RECORDED)
    prep = prepare(data, HashingEncoder(384), split=split, progress=False)
    space = Space.from_core(train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=20), members=1,
                                        progress=False).without_models(list(RECORDED)))
    space.save(tmp_path / "space")
    labels = {(full.models[m], full.question_ids[q]): y for q, m, y in zip(full.q_idx, full.m_idx, full.labels)}
    texts = {q: str(t).strip() for q, t in zip(data.question_ids, data.texts)}
    with ReplayServer(folder, models=list(RECORDED)) as server:
        for llm, kind in RECORDED.items():
            key = AnswerKey.read(folder / "answers.csv.gz", default_kind=kind)
            report = onboard_endpoint(server.url, llm, answer_key=key, space=str(tmp_path / "space"), max_answers=30,
                                      answer_log=tmp_path / f"{llm}.jsonl", progress=False)
            answers = {r["question_id"]: r["output"]
                       for r in map(json.loads, (tmp_path / f"{llm}.jsonl").read_text().splitlines())}
            # a question whose text another question shares gets the first one's recorded answer
            twins = {q for q in answers if server.by_text[texts[q]] != q}
            agree = [key.grade(q, o).label == labels[(llm, q)] for q, o in answers.items()
                     if (llm, q) in labels and q not in twins]
            assert report["graded"] == 30 and len(agree) >= 25 and all(agree), llm
            assert llm in report["new_space"].model_names


def test_an_endpoint_that_trickles_or_answers_too_much_is_cut(tmp_path):
    """The timeout bounds the whole answer (a server sending a byte now and then never ends a
    read timeout), and an answer is read to a cap, not whole."""
    from jeirt_ray.api.endpoint import MAX_ANSWER_BYTES, Endpoint

    from .upstream import Upstreams
    ups = Upstreams()
    try:
        trickle = ups.start("trickle", "--drip", "0.4")  # 16 pieces 0.4 s apart: never idle for 1.5 s
        big = ups.start("big", "--pad", str(MAX_ANSWER_BYTES + 1000))
        [slow] = Endpoint(trickle, "m", timeout_s=1.5, retries=0).ask({"q": "hi"})
        assert slow.error == "no whole answer within 1.5 s" and slow.seconds < 3
        [huge] = Endpoint(big, "m", timeout_s=30, retries=0).ask({"q": "hi"})
        assert huge.error == f"answered more than {MAX_ANSWER_BYTES} bytes"
    finally:
        ups.stop()


def test_onboarding_has_one_default_per_setting_at_every_door():
    """The CLI's options, the Python functions' keywords and the HTTP request's fields agree on
    each default (target width, questions per batch, purpose, strategy: none, so the purpose's),
    and old names still work."""
    import inspect
    import warnings

    import typer

    from jeirt_ray.api.space import Space
    from jeirt_ray.cli.onboard import onboard_cmd, plan_cmd
    from jeirt_ray.model.adaptive import plan as model_plan
    from jeirt_ray.model.onboarding_defaults import (DEFAULT_BATCH, DEFAULT_MAX_ANSWERS, DEFAULT_PURPOSE,
                                                     DEFAULT_TARGET_WIDTH)
    from jeirt_ray.serving.schemas import PlanRequest

    def defaults(fn):
        out = {}
        for name, p in inspect.signature(fn).parameters.items():
            d = p.default
            out[name] = d.default if isinstance(d, typer.models.OptionInfo) else d
        return out
    cli, cli_plan = defaults(onboard_cmd), defaults(plan_cmd)
    python, python_plan = defaults(onboard_endpoint), defaults(Space.plan)
    http = {n: f.default for n, f in PlanRequest.model_fields.items()}
    assert cli["target_width"] == cli_plan["target_width"] == python["target_width"] == \
        python_plan["target_width"] == http["target_width"] == DEFAULT_TARGET_WIDTH
    assert cli["batch"] == python["batch"] == cli_plan["k"] == python_plan["k"] == http["k"] == DEFAULT_BATCH
    assert cli["purpose"] == cli_plan["purpose"] == python["purpose"] == python_plan["purpose"] == \
        http["purpose"] == defaults(model_plan)["purpose"] == DEFAULT_PURPOSE
    assert cli["strategy"] == cli_plan["strategy"] == python["strategy"] == python_plan["strategy"] == \
        http["strategy"] == defaults(model_plan)["strategy"] is None
    assert cli["max_answers"] == DEFAULT_MAX_ANSWERS
    old = PlanRequest(model="m", budget_usd=1.5, price_usd_per_mtok=[1, 2])
    assert old.max_usd == 1.5
    with pytest.raises(ValueError, match="not both"):
        PlanRequest(model="m", budget_usd=1.5, max_usd=2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from jeirt_ray.core.renamed import take
        assert take(None, 7, "budget", "max_answers", "a test of the old spelling") == 7
    assert any("`budget` is now `max_answers`" in str(w.message) for w in caught)


def test_jeirt_replay_serves_recorded_answers_until_stopped(world, tmp_path):
    """`jeirt replay`: the recorded answer of a question, over HTTP as OpenAI's API answers; a
    folder without recordings is one line, not a traceback; SIGTERM stops it."""
    import signal
    import subprocess
    import sys

    import httpx
    jeirt = [sys.executable, "-m", "jeirt_ray.cli"]
    bad = subprocess.run(jeirt + ["replay", "--data", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no questions file to replay" in bad.stdout and "Traceback" not in bad.stdout + bad.stderr
    proc = subprocess.Popen(jeirt + ["replay", "--data", str(world["data"]), "--port", "0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        url = first.split(" at ")[1].split(" ")[0]
        q = world["space"].question_ids[0]
        text = dict(zip(world["space"].question_ids, world["space"].question_texts))[q]
        r = httpx.post(f"{url}/chat/completions", timeout=30, json={
            "model": LLM, "messages": [{"role": "user", "content": f"Answer this.\n\n{text}"}]})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"].startswith("Some reasoning. The answer is (")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_replay_finds_a_question_with_blank_lines_alone_or_after_instructions(tmp_path):
    """A question whose text holds a blank line (mmlu_pro's health has many) is replayed whether
    it is sent alone (as a gateway relays a user's question) or after instructions (as onboarding
    asks it); before, the message was cut at its first blank line and such a question was unknown."""
    from jeirt_ray.api.endpoint import prompt_for
    (tmp_path / "outputs").mkdir()
    texts = {"q1": "A patient presents.\n\nWhich organ?\nA. heart\nB. liver", "q2": "Plain question?\nA. x\nB. y"}
    pd.DataFrame({"question_id": list(texts), "text": list(texts.values())}).to_csv(tmp_path / "questions.csv",
                                                                                    index=False)
    with gzip.open(tmp_path / "outputs" / "m.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"question_id": q, "output": f"answer to {q}"}) + "\n" for q in texts)
    with ReplayServer(tmp_path) as server:
        for q, text in texts.items():
            for message in (text, prompt_for("letter", text)):
                r = httpx.post(f"{server.url}/chat/completions", timeout=10,
                               json={"model": "m", "messages": [{"role": "user", "content": message}]})
                assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == f"answer to {q}", r.text
        r = httpx.post(f"{server.url}/chat/completions", timeout=10,
                       json={"model": "m", "messages": [{"role": "user", "content": "Which organ?\nA. heart\nB. liver"}]})
        assert r.status_code == 400 and "unknown question" in r.text
