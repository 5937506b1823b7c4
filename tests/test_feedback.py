"""The decision log and the feedback store, without Ray (feedback/)."""

import os
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from jeirt_ray.feedback import Conflict, DecisionLog, FeedbackStore, Grade, LogSettings, find, id_time, new_id
from jeirt_ray.feedback.log import days, prune


def _rows(n, now=None, **extra):
    return [{"id": new_id(now), "query_index": 0, "route": "route", "chosen": "a", "candidates": ["a", "b"],
             "p_correct": [0.6, 0.4], "embedding": [0.5, -0.5], "query": "what is 2+2?", "answer": "4", **extra}
            for _ in range(n)]


def test_rows_are_written_by_day_found_by_id_and_keep_only_what_the_settings_allow(tmp_path):
    log = DecisionLog(LogSettings(root=str(tmp_path / "log"), flush_s=60))
    yesterday = _rows(2, time.time() - 86400)
    today = _rows(3)
    assert log.append(yesterday + today) == (5, 0)
    assert log.lookup(today[1]["id"])[0]["chosen"] == "a"  # buffered: found before it is written
    assert find(log.fs, log.root, today[1]["id"]) == []
    assert log.flush() == 5 and log.stats()["pending"] == 0
    assert len(days(log.fs, log.root)) == 2
    row = find(log.fs, log.root, today[1]["id"])[0]
    assert row["embedding"] == [0.5, -0.5] and row["query"] is None and row["answer"] is None
    assert abs(row["time"].timestamp() - id_time(today[1]["id"])) < 1e-3
    assert len(pq.read_table(tmp_path / "log")) == 5  # one table for Ray Data, partitioned by day
    log.close()

    kept = DecisionLog(LogSettings(root=str(tmp_path / "text"), log_queries="text", log_answers="text", flush_s=60))
    none = DecisionLog(LogSettings(root=str(tmp_path / "none"), log_queries="none", flush_s=60))
    for one in (kept, none):
        one.append(_rows(1))
        one.close()  # closing writes the buffer
    assert pq.read_table(tmp_path / "text").to_pylist()[0]["query"] == "what is 2+2?"
    assert pq.read_table(tmp_path / "none").to_pylist()[0]["embedding"] is None


def test_a_failing_filesystem_keeps_the_buffer_up_to_its_bound_and_counts_the_rest(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    log = DecisionLog(LogSettings(root=str(blocker / "log"), flush_s=60, max_pending=3))
    assert log.append(_rows(2)) == (2, 0)
    assert log.flush() == 0
    assert log.append(_rows(2)) == (1, 1)
    stats = log.stats()
    assert stats.pop("pending_mb") > 0
    assert stats == {"logged": 3, "written": 0, "dropped": 1, "failed_writes": 1, "pending": 3}
    blocker.unlink()
    blocker.mkdir()  # the filesystem is back: nothing buffered is lost
    assert log.flush() == 3 and log.stats()["written"] == 3
    log.close()


def test_the_buffer_is_bounded_in_bytes_too(tmp_path):
    log = DecisionLog(LogSettings(root=str(tmp_path), flush_s=60, max_pending_mb=0.01))  # about 10 KB
    big = _rows(4, query="x" * 4000)  # the text is dropped unless kept: these rows are small
    assert log.append(big) == (4, 0)
    kept = DecisionLog(LogSettings(root=str(tmp_path), flush_s=60, log_queries="text", max_pending_mb=0.01))
    assert kept.append(_rows(4, query="x" * 4000)) == (2, 2)
    assert kept.stats()["dropped"] == 2 and kept.stats()["pending_mb"] <= 0.01
    assert kept.flush() == 2 and kept.append(_rows(1, query="x" * 4000)) == (1, 0)  # written: room again
    for one in (log, kept):
        one.close()


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_writer_compacts_its_files_of_each_hour_that_is_over_into_one(tmp_path):
    from jeirt_ray.feedback.graders import read_log
    root = tmp_path / "log"
    log, other = (DecisionLog(LogSettings(root=str(root), flush_s=60)) for _ in range(2))
    now = time.time()
    past = [_rows(1, now - 7200 + i)[0] for i in range(5)]
    for r in past:  # one file per flush, as a busy replica writes one a second
        log.append([r])
        log.flush()
    other.append(_rows(1, now - 7200))
    other.flush()
    log.append(_rows(1, now))
    log.flush()
    hour = (root / _files(root)[0]).parent
    stale, fresh = hour / ".1-2-dead-1.parquet.tmp", hour / ".3-4-busy-1.parquet.tmp"
    for orphan in (stale, fresh):
        orphan.write_bytes(b"half a file")
    os.utime(stale, (now - 2 * 3600, now - 2 * 3600))
    assert len(_files(hour)) == 8

    assert log.compact() == 1  # the past hour; this hour is not over
    names = _files(hour)
    assert len([n for n in names if log.writer in n]) == 1 and len([n for n in names if other.writer in n]) == 1
    assert fresh.exists() and not stale.exists()  # a temporary file a dead writer left, an hour on
    assert [r["id"] for r in read_log(str(root), None, ["id"]).to_pylist()].count(past[2]["id"]) == 1
    assert find(log.fs, log.root, past[2]["id"])[0]["chosen"] == "a"
    assert log.compact() == 0 and other.compact() == 0  # other wrote one file there: nothing to merge
    assert read_log(str(root), None, ["id"]).num_rows == 7
    for one in (log, other):
        one.close()


def test_readers_see_each_row_once_while_a_merge_is_between_its_move_and_its_deletes(tmp_path):
    import shutil

    from jeirt_ray.feedback.graders import read_log
    root = tmp_path / "log"
    log = DecisionLog(LogSettings(root=str(root), flush_s=60))
    rows = _rows(2)
    rows[1]["id"], rows[1]["query_index"] = rows[0]["id"], 1
    log.append(rows)
    log.close()
    written = root / _files(root)[0]
    shutil.copy(written, written.with_name(written.name.replace("-1.parquet", "-2.parquet")))
    assert [r["query_index"] for r in find(log.fs, log.root, rows[0]["id"], ["chosen"] + ["query_index"])] == [0, 1]
    assert find(log.fs, log.root, rows[0]["id"], ["chosen"]) == [{"chosen": "a"}] * 2
    assert read_log(str(root), None, ["chosen"]).num_rows == 2


def test_a_failed_write_leaves_no_temporary_file_and_keeps_its_rows(tmp_path, monkeypatch):
    import jeirt_ray.feedback.log as log_module

    def half_then_fail(table, where, **kwargs):
        open(where, "wb").write(b"half")
        raise OSError("disk full")

    log = DecisionLog(LogSettings(root=str(tmp_path / "log"), flush_s=60))
    log.append(_rows(2))
    monkeypatch.setattr(log_module.pq, "write_table", half_then_fail)
    assert log.flush() == 0 and log.stats()["pending"] == 2
    assert _files(tmp_path / "log") == []
    monkeypatch.undo()
    assert log.flush() == 2
    log.close()


def test_a_log_written_by_day_alone_is_still_found_and_read(tmp_path):
    from jeirt_ray.feedback.graders import read_log
    root = tmp_path / "log"
    log = DecisionLog(LogSettings(root=str(root), flush_s=60))
    rows = _rows(1)
    log.append(rows)
    log.close()
    written = root / _files(root)[0]
    written.rename(written.parent.parent / written.name)  # where logs before hour folders kept it
    written.parent.rmdir()
    assert find(log.fs, log.root, rows[0]["id"])[0]["chosen"] == "a"
    assert read_log(str(root), None, ["id"]).to_pylist() == [{"id": rows[0]["id"]}]


def test_retention_deletes_whole_days_older_than_it(tmp_path):
    log = DecisionLog(LogSettings(root=str(tmp_path), flush_s=60))
    log.append(_rows(1, time.time() - 10 * 86400) + _rows(1, time.time() - 2 * 86400) + _rows(1))
    log.flush()
    log.close()
    assert len(prune(log.fs, log.root, retention_days=5)) == 1
    assert len(days(log.fs, log.root)) == 2
    assert prune(log.fs, log.root, retention_days=5) == []


def test_feedback_is_recorded_once_per_decision_and_source(tmp_path):
    url = f"sqlite:///{tmp_path / 'fb.db'}"
    store, other = FeedbackStore(url), FeedbackStore(url)  # two replicas, one database
    d = new_id()
    assert store.add(Grade(d, 1.0, llm="a", embedding=np.array([1, 2], np.float32))) == "recorded"
    assert other.add(Grade(d, 1.0, llm="a")) == "unchanged"
    with pytest.raises(Conflict, match="another score"):
        other.add(Grade(d, 0.0))
    assert store.add(Grade(d, 0.0, source="judge")) == "recorded"
    assert store.add(Grade(d, 0.5, query_index=1)) == "recorded"
    rows = store.since()
    assert [r["seq"] for r in rows] == [1, 2, 3] and store.since(2)[0]["query_index"] == 1
    assert rows[0]["embedding"].tolist() == [1.0, 2.0] and rows[1]["embedding"] is None
    for bad in ({"score": 1.5}, {"score": float("nan")}, {"score": True}, {"score": 1, "source": "crowd"}):
        with pytest.raises(ValueError):
            Grade(d, **bad)


def test_a_store_made_before_the_propensity_column_gets_it_and_keeps_its_rows(tmp_path):
    import sqlalchemy as sa
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as c:  # the table as the store made it before propensities were kept
        c.execute(sa.text("CREATE TABLE jeirt_feedback (seq INTEGER PRIMARY KEY AUTOINCREMENT, id VARCHAR(28) NOT NULL, "
                          "query_index INTEGER NOT NULL, source VARCHAR(16) NOT NULL, score FLOAT NOT NULL, "
                          "time FLOAT NOT NULL, llm VARCHAR(200), space VARCHAR(300), key_id VARCHAR(16), "
                          "encoder VARCHAR(300), embedding BLOB, comment VARCHAR(2000), "
                          "CONSTRAINT jeirt_feedback_once UNIQUE (id, query_index, source))"))
        c.execute(sa.text("INSERT INTO jeirt_feedback (id, query_index, source, score, time, llm) "
                          "VALUES ('old', 0, 'user', 1.0, 0, 'a')"))
    engine.dispose()
    store, again = FeedbackStore(url), FeedbackStore(url)  # two replicas opening it
    assert store.add(Grade(new_id(), 0.0, llm="a", propensity=0.5)) == "recorded"
    assert [(r["id"], r["propensity"]) for r in again.since()][0] == ("old", None)
    assert again.since()[1]["propensity"] == 0.5


def test_jeirt_feedback_records_a_file_checking_every_row_first(tmp_path):
    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    log = DecisionLog(LogSettings(root=str(tmp_path / "log"), flush_s=60))
    rows = _rows(2, propensity=0.25)  # an exploring router's choices
    log.append(rows)
    log.close()
    db = f"sqlite:///{tmp_path / 'fb.db'}"
    args = ["--decisions", str(tmp_path / "log"), "--db", db]
    grades = tmp_path / "grades.csv"
    grades.write_text(f"id,score,source,llm\n{rows[0]['id']},1,key,\n{rows[1]['id']},0.5,,b\n{new_id()},1,,\n")
    run = CliRunner().invoke(app, ["feedback", str(grades), *args])
    assert run.exit_code == 1, run.output  # the third names no logged decision
    assert "2 recorded, 0 already recorded, 1 unknown, 0 conflicting" in run.output and "row 3" in run.output
    stored = FeedbackStore(db).since()
    assert [(g["source"], g["llm"], g["score"]) for g in stored] == [("key", "a", 1.0), ("user", "b", 0.5)]
    # the propensity is the chosen LLM's: kept for a grade of it, not for a grade of another
    assert [g["propensity"] for g in stored] == [0.25, None]

    grades.write_text(f"id,score\n{rows[0]['id']},1\n{rows[1]['id']},1.5\n")
    run = CliRunner().invoke(app, ["feedback", str(grades), *args])
    assert run.exit_code == 2 and "row 2, column score: '1.5'" in run.output
    assert FeedbackStore(db).count() == 2  # nothing of the bad file was recorded
    grades.write_text(f"id,score,source\n{rows[0]['id']},1,key\n{rows[0]['id']},0,user\n")
    run = CliRunner().invoke(app, ["feedback", str(grades), *args])
    assert run.exit_code == 0 and "1 recorded, 1 already recorded" in run.output


def test_an_answer_key_grades_the_logged_answers_it_can_and_counts_the_rest(tmp_path):
    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    from jeirt_ray.data.answer_key import AnswerKey
    from jeirt_ray.feedback.graders import grade_with_key
    log = DecisionLog(LogSettings(root=str(tmp_path / "log"), log_queries="text", log_answers="text", flush_s=60))
    asked = [("What is 2+2? A) 3 B) 4", "The answer is B", 1.0), ("What is 2+3? A) 5 B) 6", "Answer: B", 0.0),
             ("What is 2+2? A) 3 B) 4", "I think (A)", 0.0)]
    rows = [dict(r, query=q, answer=a, answered_by="b", status=200)
            for r, (q, a, _) in zip(_rows(3), asked)]
    rows += [dict(r, query="an unkeyed question", answer="B", answered_by="a", status=200) for r in _rows(1)]
    rows += [dict(r, answered_by=None, status=502) for r in _rows(1)]
    rows[0].update(chosen="b", propensity=0.25)  # an explored choice that answered; the others fell back to b
    log.append(rows)
    log.close()
    key_file = tmp_path / "key.csv"
    key_file.write_text("question_id,answer\nq1,B\nq2,A\n")
    questions = {"What is 2+2? A) 3 B) 4": "q1", "What is 2+3? A) 5 B) 6": "q2"}
    store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
    counts = grade_with_key(AnswerKey.read(key_file), questions, store, str(tmp_path / "log"))
    assert counts == {"recorded": 3, "unchanged": 0, "no_text": 0, "no_answer": 1, "not_in_key": 1, "conflict": 0}
    graded = {g["id"]: g for g in store.since()}
    assert [graded[r["id"]]["score"] for r in rows[:3]] == [label for *_, label in asked]
    assert all(g["source"] == "key" and g["llm"] == "b" and len(g["embedding"]) == 2 for g in graded.values())
    # as POST /v1/feedback keeps it: the policy's probability where its choice answered
    assert [graded[r["id"]]["propensity"] for r in rows[:3]] == [0.25, None, None]
    assert grade_with_key(AnswerKey.read(key_file), questions, store, str(tmp_path / "log"))["unchanged"] == 3

    data = tmp_path / "qs.csv"  # the CLI: the questions' texts from a file
    data.write_text('question_id,text\nq1,"What is 2+2? A) 3 B) 4"\nq2,"What is 2+3? A) 5 B) 6"\n')
    run = CliRunner().invoke(app, ["grade", "--key", str(key_file), "--questions", str(data), "--decisions",
                                   str(tmp_path / "log"), "--db", f"sqlite:///{tmp_path / 'fb.db'}"])
    assert run.exit_code == 0, run.output
    assert "0 recorded, 3 already recorded" in run.output and "1 not in the key" in run.output


def test_an_llm_judge_grades_a_share_counts_what_it_cannot_parse_and_its_own_cost(tmp_path):
    """Against a scripted OpenAI-compatible judge on loopback (tests/upstream.py; no LLM runs here)."""
    import json

    from jeirt_ray.api.endpoint import Endpoint
    from jeirt_ray.api.judge import judge_log, parse_verdict, sampled

    from .upstream import Upstreams
    verdicts = {"\n4": "Right: 2+2 is 4.\nSCORE: 10", "\n5": "Wrong sum.\n**SCORE: 2/10**",
                "\nmaybe": "I cannot tell.", "\ntwice": "SCORE: 3\nSCORE: 4", "\ndown": 500}
    (tmp_path / "verdicts.json").write_text(json.dumps(verdicts))
    ups = Upstreams()
    judge_url = ups.start("judge", "--replies", str(tmp_path / "verdicts.json"))
    try:
        log = DecisionLog(LogSettings(root=str(tmp_path / "log"), log_queries="text", log_answers="text", flush_s=60))
        rows = [dict(r, query="What is 2+2?", answer=a, answered_by="a", status=200)
                for r, a in zip(_rows(5), ["4", "5", "maybe", "twice", "down"])]
        rows += [dict(r, answered_by="a", status=200, query=None) for r in _rows(1)]  # no text kept
        log.append(rows)
        log.close()
        store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
        judge = Endpoint(judge_url, "judge", retries=0)
        counts = judge_log(judge, store, str(tmp_path / "log"), share=1.0, price_usd_per_mtok=(1.0, 2.0))
        assert {k: counts[k] for k in ("judged", "recorded", "unparseable", "failed", "no_text")} == \
            {"judged": 5, "recorded": 2, "unparseable": 2, "failed": 1, "no_text": 1}
        # the upstream counts 1 prompt token and a token per word of its reply
        words = sum(len(v.split()) for v in verdicts.values() if isinstance(v, str))
        assert counts["prompt_tokens"] == 4 and abs(counts["usd"] - (4 * 1.0 + words * 2.0) / 1e6) < 1e-12
        assert sorted((g["score"], g["source"]) for g in store.since()) == [(0.2, "judge"), (1.0, "judge")]
        assert counts["failures"] == {"HTTP 500": 1}  # why calls failed, said
        again = judge_log(judge, store, str(tmp_path / "log"), share=1.0)
        assert again["judged_before"] == 2 and again["judged"] == 3 and store.count() == 2  # graded ones not asked again
        from typer.testing import CliRunner

        from jeirt_ray.cli.main import app
        down = CliRunner().invoke(app, ["judge", "--endpoint", "http://127.0.0.1:9/v1", "--model", "judge", "--share",
                                        "1", "--decisions", str(tmp_path / "log"), "--db",
                                        f"sqlite:///{tmp_path / 'other.db'}"])
        assert down.exit_code == 1 and "calls failed: 5 x" in down.output, down.output  # none judged: not a success
        bad = CliRunner().invoke(app, ["judge", "--endpoint", "http://127.0.0.1:9/v1", "--model", "judge",
                                       "--price-in", "nan", "--price-out", "1"])
        assert bad.exit_code == 2 and "--price-in must be a number of USD" in bad.output, bad.output
    finally:
        ups.stop()
    assert parse_verdict("SCORE: 11") is None and parse_verdict("score: 7") == 0.7 and parse_verdict(None) is None
    ids = [new_id() for _ in range(4000)]
    assert 0.08 < np.mean([sampled(d, 0.1) for d in ids]) < 0.12 and all(sampled(d, 0.1) == sampled(d, 0.1) for d in ids)


def test_jeirt_shadow_estimates_the_challengers_value_from_the_graded_traffic(tmp_path, monkeypatch):
    """An exploring service chose LLM a with probability 0.7 and b with 0.3; a answers right half of
    the time, b 80%. A challenger that routed every decision in shadow to b is worth 0.8: the
    off-policy estimates find it within their intervals and better than the served 0.59; a
    challenger that chooses as a service that does not explore is not shown better; no shadow log
    names the setting; --promote moves @champion only on that evidence and from the served version."""
    import json

    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    from jeirt_ray.feedback.log import shadow_root
    from jeirt_ray.feedback.shadow import compare_shadow
    rng = np.random.default_rng(0)
    root, db = str(tmp_path / "log"), f"sqlite:///{tmp_path / 'fb.db'}"
    store = FeedbackStore(db)
    served, shadow = [], []
    for _ in range(1500):
        picked = "a" if rng.random() < 0.7 else "b"
        prop = 0.7 if picked == "a" else 0.3
        d = new_id()
        served.append({"id": d, "query_index": 0, "route": "chat", "space": "m/1", "candidates": ["a", "b"],
                       "p_correct": [0.55, 0.6], "chosen": picked, "propensity": prop})
        shadow.append({"id": d, "query_index": 0, "route": "chat", "space": "m/2", "candidates": ["a", "b"],
                       "p_correct": [0.5, 0.8], "chosen": "b", "propensity": 1.0})
        store.add(Grade(d, float(rng.random() < (0.5 if picked == "a" else 0.8)), "key", llm=picked, propensity=prop))
    for where, rows in ((root, served), (shadow_root(root), shadow)):
        log = DecisionLog(LogSettings(root=where))
        log.append(rows)
        log.close()
    out = compare_shadow(root, db, sources="key")
    assert out["compared"] == 1500 and out["graded_not_compared"] == 0 and out["explored"] == 1500
    assert abs(out["agreement"] - 0.3) < 0.05
    assert abs(out["served"]["mean"] - 0.59) < 0.04
    for k in ("ips", "dr"):
        lo, hi = out["challenger"][f"{k}_ci95"]
        assert lo < 0.8 < hi and hi - lo < 0.15, (k, out["challenger"])
    assert out["better"] and out["challenger_minus_served_dr_ci95"][0] > 0.1
    assert out["served_space"] == ["m/1"] and out["challenger_space"] == ["m/2"]

    # a service that does not explore, and a challenger that chooses as it does: nothing to show
    plain = [{**r, "id": new_id(), "chosen": "a", "propensity": 1.0} for r in served[:300]]
    for r in plain:
        store.add(Grade(r["id"], float(rng.random() < 0.5), "key", llm="a", propensity=1.0))
    for where, rows in ((str(tmp_path / "same"), plain), (shadow_root(str(tmp_path / "same")), plain)):
        log = DecisionLog(LogSettings(root=where))
        log.append([dict(r) for r in rows])
        log.close()
    run = CliRunner().invoke(app, ["shadow", "--decisions", str(tmp_path / "same"), "--db", db, "--json"])
    assert run.exit_code == 0, run.output
    same_out = json.loads(run.output)
    assert same_out["compared"] == 300 and same_out["agreement"] == 1.0 and not same_out["better"]
    assert same_out["challenger_minus_served_dr"] == 0.0
    run = CliRunner().invoke(app, ["shadow", "--decisions", str(tmp_path / "nothing"), "--db", db])
    assert run.exit_code == 2 and "user_config.shadow" in run.output

    # --promote moves the served alias only on the evidence, and only from the version served
    from jeirt_ray.feedback.shadow import promote
    from jeirt_ray.tracking.registry import SpaceRegistry
    registry = SpaceRegistry(f"sqlite:///{tmp_path / 'mlflow.db'}")
    registry.client.create_registered_model("m")
    for _ in range(3):
        registry.client.create_model_version("m", source=str(tmp_path))
    registry.promote("m", 1)
    assert promote({**out, "better": False}, registry=registry)["promoted"] is False
    assert str(registry.resolve("models:/m@champion").version) == "1"
    registry.promote("m", 3)  # moved since the traffic was served: the evidence is about version 1
    with pytest.raises(ValueError, match="not the served m/1"):
        promote(out, registry=registry)
    registry.promote("m", 1)
    with pytest.raises(ValueError, match="2 challenger versions"):
        promote({**out, "challenger_space": ["m/2", "m/3"]}, registry=registry)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry.tracking_uri)
    run = CliRunner().invoke(app, ["shadow", "--decisions", root, "--db", db, "--source", "key", "--promote",
                                   "champion"])
    assert run.exit_code == 0 and "@champion moved from models:/m/1 to models:/m/2" in run.output, run.output
    assert str(registry.resolve("models:/m@champion").version) == "2"
    evidence = json.loads(registry.resolve("models:/m@champion").tags["shadow_evidence"])
    assert evidence["served"] == "m/1" and evidence["challenger_minus_served_dr_ci95"][0] > 0.1
    run = CliRunner().invoke(app, ["shadow", "--decisions", root, "--db", db, "--source", "crowd"])
    assert run.exit_code == 2 and "unknown source(s) ['crowd']: choose among user, judge, key" in run.output


WRITER = """
import sys, time
from jeirt_ray.feedback.log import DecisionLog, LogSettings, new_id
log = DecisionLog(LogSettings(root=sys.argv[1], flush_s=0.5))
n = 0
while True:
    log.append([{"id": new_id(), "query_index": 0, "route": "route", "chosen": "a", "candidates": ["a"],
                 "p_correct": [0.5], "propensity": 1.0}])
    n += 1
    print(n, time.time(), flush=True)
    time.sleep(0.002)
"""


def test_a_process_killed_while_logging_loses_at_most_its_last_flush_interval(tmp_path):
    """A replica's log is a thread of its process: SIGKILL (no goodbye) loses the rows appended
    since its last write, at most flush_s (0.5 s here) of them plus the write in progress, and
    leaves no half-written file for readers."""
    import signal
    import subprocess
    import sys
    root = tmp_path / "log"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # writing (importing jeirt_ray alone takes seconds here)
        time.sleep(4.0)
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        out = first + out
    finally:
        if proc.poll() is None:
            proc.kill()
    appended = [(int(n), float(t)) for n, t in (line.split() for line in out.splitlines() if line.strip())]
    written = pq.read_table(root).num_rows  # the temporary files are hidden (dot-names)
    lost = len(appended) - written
    at_risk = sum(1 for _, t in appended if t > killed_at - 0.5 - 0.5)  # flush_s, and a write's own time
    assert written > 0 and 0 <= lost <= at_risk, (len(appended), written, at_risk)


def test_a_slow_challenger_in_shadow_holds_a_bounded_number_of_routes_and_counts_the_rest(tmp_path):
    """Shadow routes run in the background; when the challenger is slower than the traffic, at most
    MAX_PENDING are in flight per replica and the sampled requests beyond are counted as skipped."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from jeirt_ray.serving.settings import RouterConfig
    from jeirt_ray.serving.loop.shadow import MAX_PENDING, ShadowRouting
    release = threading.Event()

    class SlowChallenger:
        label = "m/2"

        def route(self, x, texts=None, **options):
            release.wait(30)
            return [{"chosen": "a"}]

    live = SimpleNamespace(model="m", config=RouterConfig(shadow={"share": 1.0}))
    shadow = ShadowRouting(live, "hashing-4", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shadow.core = SlowChallenger()
    recorder = SimpleNamespace(log=DecisionLog(LogSettings(root=str(tmp_path / "log"))),
                               rows=lambda *args: [{"id": args[0], "query_index": 0, "chosen": "a"}])

    async def traffic():
        for _ in range(MAX_PENDING + 30):
            shadow.offer(recorder, new_id(), "route", None, np.zeros((1, 4)), ["q"], {})
        assert len(shadow._tasks) == MAX_PENDING and shadow.counts["skipped"] == 30
        release.set()
        while shadow._tasks:
            await asyncio.sleep(0.05)
    asyncio.run(asyncio.wait_for(traffic(), 60))
    assert shadow.counts == {"routed": MAX_PENDING, "failed": 0, "skipped": 30}
    shadow.close()
    recorder.log.close()


def test_stores_opened_at_once_on_a_new_database_all_open(tmp_path):
    """A replica opens the feedback database from two threads (its learner and its first
    feedback request), and replicas open it together: creating the table at the same moment is
    not an error (it was: "table jeirt_feedback already exists", a 500 on POST /v1/feedback)."""
    import concurrent.futures
    for attempt in range(5):
        url = f"sqlite:///{tmp_path}/race{attempt}.db"
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            stores = list(pool.map(lambda _: FeedbackStore(url), range(8)))
        assert stores[0].add(Grade(new_id(), 1.0, "key")) == "recorded"
        assert all(s.count() == 1 for s in stores)


def test_a_log_storage_that_cannot_be_read_is_an_error_not_no_decision():
    """An outage must not read as "no such decision" (a 404 clients would not retry): POST
    /v1/feedback answers 503 for it."""
    from jeirt_ray.feedback.log import find

    class Down:
        def get_file_info(self, selector):
            raise OSError("When getting information for key 'log/day=...': AWS Error NETWORK_CONNECTION")
    with pytest.raises(OSError, match="NETWORK_CONNECTION"):
        find(Down(), "log", new_id())


def test_a_row_that_commits_late_on_postgresql_is_read_not_skipped(postgres_url):
    """Two writers: a row numbered first commits after the next one. A reader that moves its
    cursor to the last row it read must not have passed it: rows written in the last settle_s
    seconds wait for the next read (SQLite, one writer at a time, needs no wait)."""
    import sqlalchemy as sa

    from jeirt_ray.feedback import store as store_module
    store = FeedbackStore(postgres_url)
    store.settle_s = 1.0
    start = store.window(0, 0.0)[0]
    late = new_id()
    with store.engine.connect() as c:
        tx = c.begin()
        c.execute(store_module._feedback.insert().values(id=late, query_index=0, source="user", score=1.0,
                                                         time=time.time(), llm="a"))  # numbered, not committed
        store.add(Grade(new_id(), 0.0, llm="b"))  # numbered after it, committed first
        assert [r["llm"] for r in store.since(start)] == ["b"]  # what an unsettled reader would take and pass
        assert store.since(start, settled=True) == []  # too recent to be sure nothing before it is committing
        tx.commit()
    time.sleep(1.2)
    assert [r["llm"] for r in store.since(start, settled=True)] == ["a", "b"]
    assert store.window(start, 0.0)[0] == start + 2
    assert FeedbackStore(f"sqlite:///{tempfile.mkdtemp()}/f.db").settle_s == 0
    assert isinstance(store_module._feedback.c.seq.type, sa.BigInteger)


def test_since_reads_the_hours_it_says_not_the_whole_utc_day(tmp_path):
    from jeirt_ray.feedback.graders import read_log
    root = str(tmp_path / "log")
    log = DecisionLog(LogSettings(root=root, flush_s=60))
    now = time.time()
    log.append(_rows(1, now - 360) + _rows(1, now - 5 * 3600) + _rows(1, now - 20 * 3600))
    log.close()
    assert [read_log(root, days, ["id"]).num_rows for days in (1 / 24, 0.5, 2.0)] == [1, 2, 3]


def test_jeirt_decision_looks_one_up_by_its_id_with_its_grades(tmp_path):
    import json

    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    root, url = str(tmp_path / "log"), f"sqlite:///{tmp_path / 'fb.db'}"
    rows = _rows(2, propensity=0.4)
    log = DecisionLog(LogSettings(root=root, flush_s=60))
    log.append(rows)
    log.close()
    FeedbackStore(url).add(Grade(rows[1]["id"], 1.0, "judge", llm="a", propensity=0.4))
    run = CliRunner().invoke(app, ["decision", rows[1]["id"], "--decisions", root, "--db", url])
    assert run.exit_code == 0, run.output
    out = json.loads(run.output)
    assert out["queries"][0]["chosen"] == "a" and out["queries"][0]["propensity"] == pytest.approx(0.4)
    assert "embedding" not in out["queries"][0]
    assert [(g["source"], g["score"]) for g in out["grades"]] == [("judge", 1.0)]
    unknown = CliRunner().invoke(app, ["decision", new_id(), "--decisions", root, "--db", url])
    assert unknown.exit_code == 1 and "no decision" in unknown.output
    bad = CliRunner().invoke(app, ["decision", "xyz", "--decisions", root])
    assert bad.exit_code == 2 and "is not a decision id" in bad.output


def test_every_db_option_fails_in_one_line_and_readers_create_nothing(tmp_path):
    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    from jeirt_ray.feedback.store import StoreUnavailable
    grades = tmp_path / "grades.csv"
    grades.write_text(f"id,score\n{new_id()},1\n")
    for db, message in ((str(tmp_path / "fb.db"), "is not a database URL: give sqlite:///"),
                        ("postgresql://me:SECRET@127.0.0.1:1/x", "cannot be opened (OperationalError"),
                        ("mysql://me:SECRET@127.0.0.1/x", "cannot be opened (ModuleNotFoundError")):
        run = CliRunner().invoke(app, ["feedback", str(grades), "--db", db, "--decisions", str(tmp_path / "log")])
        assert run.exit_code == 1 and message in run.output and "Traceback" not in run.output, run.output
        assert "SECRET" not in run.output
    missing = tmp_path / "nothing" / "fb.db"
    with pytest.raises(StoreUnavailable, match="no feedback database at"):
        FeedbackStore(f"sqlite:///{missing}", create=False)
    assert not missing.parent.exists()  # a reader created nothing
