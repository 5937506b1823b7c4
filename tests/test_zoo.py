"""A model zoo: LLM sizes from a folder's models.csv kept with the space, candidates by name, glob
and size, paged listings, the LLMs that answer alike, and bulk onboarding on Ray (resumable, a
bad LLM skipped by name, one new version). The serving side is in test_serve_app.py."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import jeirt_ray as jr
from jeirt_ray.cli.main import app
from jeirt_ray.data import load_data
from jeirt_ray.data.synthetic import generate
from jeirt_ray.model.space import NOT_ANSWERED
from jeirt_ray.zoo.catalog import Catalog, CandidateFilter, NoCandidates, UnknownLLMs

from .conftest import registry_env

runner = CliRunner()
NAMES = ["org/Mistral-7B-base", "org/mistral-7b-chat", "other/Llama-3-8B", "other/tiny-1B", "solo"]
SIZES = {"org/Mistral-7B-base": {"params_b": 7.2}, "org/mistral-7b-chat": {"params_b": 7.2},
         "other/Llama-3-8B": {"params_b": 8.0}, "other/tiny-1B": {"params_b": 1.1}}  # solo: unknown


def _select(spec, size=None):
    found = Catalog(NAMES, SIZES).select(CandidateFilter.of(spec, size))
    return None if found is None else [NAMES[i] for i in found]


def test_candidates_by_name_glob_and_size_and_the_filter_that_leaves_none():
    assert _select(None) is None
    assert _select("*MISTRAL*") == ["org/Mistral-7B-base", "org/mistral-7b-chat"]  # any case
    assert _select(["solo", "other/*"]) == ["solo", "other/Llama-3-8B", "other/tiny-1B"]
    assert _select(None, 7.5) == ["org/Mistral-7B-base", "org/mistral-7b-chat", "other/tiny-1B"]  # solo: no size
    assert _select(None, 10 ** 400) == [n for n in NAMES if n in SIZES]  # past a float's range: every sized LLM
    with pytest.raises(NoCandidates, match=r"matches candidates \['\*7b\*'\] and max_params_b 7"):  # the tighter
        _select({"names": "*7b*", "max_params_b": 100}, 7.0)
    with pytest.raises(NoCandidates, match=r"matches candidates \['\*gpt\*'\]"):
        _select("*gpt*")
    with pytest.raises(UnknownLLMs, match="unknown candidate LLM"):
        _select(["solo", "not-here"])
    with pytest.raises(ValueError, match="max_params_b must be a number"):
        _select(None, -1)
    with pytest.raises(ValueError, match="unknown key"):
        _select({"size": 3})
    with pytest.raises(NoCandidates, match="knows no LLM's size"):
        Catalog(NAMES).select(CandidateFilter.of(None, 7))


def test_pages_in_a_stable_order_with_filters():
    cat = Catalog(NAMES, SIZES)
    rows, more = cat.page(limit=2)
    assert [NAMES[i] for i in rows] == NAMES[:2] and more
    rows, more = cat.page(limit=2, after=NAMES[1])
    assert [NAMES[i] for i in rows] == NAMES[2:4] and more
    rows, more = cat.page(limit=2, after=NAMES[3])
    assert [NAMES[i] for i in rows] == NAMES[4:] and not more
    rows, more = cat.page(contains="MISTRAL", max_params_b=8)
    assert [NAMES[i] for i in rows] == NAMES[:2] and not more
    with pytest.raises(LookupError, match="after: no LLM 'gone'"):
        cat.page(after="gone")
    with pytest.raises(ValueError, match="limit must be 1 to 1000"):
        cat.page(limit=0)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A folder whose models.csv gives sizes (-1: unknown, as the Open LLM Leaderboard writes it),
    with a twin: synthetic-llm-01's answers copied under another name."""
    folder = tmp_path_factory.mktemp("zoo") / "known"
    data = generate(n_models=10, n_questions=300, seed=3)
    frame = pd.DataFrame({"model": data.models[data.m_idx], "question_id": data.question_ids[data.q_idx],
                          "label": data.labels})
    twin = frame[frame.model == "synthetic-llm-01"].assign(model="twin-of-01")
    data.save(folder)
    pd.concat([frame, twin]).to_csv(folder / "responses.csv", index=False)
    (folder / "responses.parquet").unlink()
    sizes = [7.0, 13.0, -1, 1.5, 7.0, 70.0, 7.0, 3.0, 8.0, 2.0, 13.0]
    pd.DataFrame({"model": [*data.models, "twin-of-01"], "params_b": sizes}).to_csv(folder / "models.csv",
                                                                                   index=False)
    return folder


def test_a_space_keeps_sizes_and_answers_and_finds_twins(zoo, tmp_path):
    space = jr.train(zoo, encoder="hashing", search=False, members=2, progress=False)
    assert space.metadata["llms"]["synthetic-llm-01"] == {"params_b": 13.0}
    assert "synthetic-llm-02" not in space.metadata["llms"]  # -1: unknown, not a size
    assert space.answers.shape == (11, 300) and (space.answers != NOT_ANSWERED).mean() > 0.5
    near = space.similar("twin-of-01", k=3)
    assert list(near.columns) == ["llm", "agreement", "shared", "cosine", "params_b"]
    assert near["llm"][0] == "synthetic-llm-01" and near["agreement"][0] == 1.0 and near["shared"][0] >= 20
    assert near["agreement"][0] > near["agreement"][1]
    assert space.similar("twin-of-01", k=3, by="cosine")["cosine"].is_monotonic_decreasing
    with pytest.raises(LookupError, match="names containing it"):
        space.similar("twin-of", k=3)
    # routing by glob and size, and a saved space keeps both
    chosen = space.route(["what is 2 + 2?"], candidates="*LLM-0[12]", top_k=None)[0]
    assert {s["model"] for s in chosen["scores"]} == {"synthetic-llm-01", "synthetic-llm-02"}
    small = space.route(["what is 2 + 2?"], max_params_b=3, top_k=None)[0]
    assert {s["model"] for s in small["scores"]} == {"synthetic-llm-03", "synthetic-llm-07", "synthetic-llm-09"}
    loaded = jr.Space.load(space.save(tmp_path / "s"))
    assert np.array_equal(loaded.answers, space.answers) and loaded.metadata["llms"] == space.metadata["llms"]
    # an onboarded LLM brings its answers and its size; dropping LLMs keeps the table aligned
    qs = space.question_ids[:40]
    row = space.answers[space.model_names.index("synthetic-llm-01"), :40]
    known = row != NOT_ANSWERED
    new = space.onboard("newcomer", [q for q, k in zip(qs, known) if k], (row[known] / 100).tolist(), params_b=7)
    assert new.metadata["llms"]["newcomer"] == {"params_b": 7.0}
    assert np.array_equal(new.answers[-1, :40], np.where(known, row, NOT_ANSWERED))
    fewer = new.without_models(["synthetic-llm-00"])
    assert fewer.answers.shape == (11, 300) and np.array_equal(fewer.answers[-1], new.answers[-1])
    r = runner.invoke(app, ["similar", "twin-of-01", "--space", str(tmp_path / "s"), "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["similar"][0]["llm"] == "synthetic-llm-01"
    r = runner.invoke(app, ["similar", "nobody", "--space", str(tmp_path / "s")])
    assert r.exit_code == 1 and "no LLM 'nobody' in this space of 11 LLMs" in r.output


def test_bulk_onboarding_on_ray_skips_a_bad_llm_by_name_and_resumes(zoo, ray_cluster, tmp_path):
    from jeirt_ray.distributed.onboard import _fit_chunk, plan_work, state_path
    from jeirt_ray.model.onboarding import directions, member_priors
    from jeirt_ray.tracking.registry import SpaceRegistry
    with registry_env(tmp_path):
        known = load_data(zoo)
        space = jr.train(zoo, encoder="hashing", search=False, members=2, progress=False)
        reg = SpaceRegistry()
        reg.promote("zoo", reg.register(space, "zoo"), "champion")
        # the new LLMs: six of another draw, one of them answering only questions the space lacks
        new = generate(n_models=6, n_questions=300, seed=4)
        rows = pd.DataFrame({"model": [f"new-{m}" for m in new.models[new.m_idx]],
                             "question_id": known.question_ids[new.q_idx], "label": new.labels})
        stray = pd.DataFrame({"model": "new-stray", "question_id": [f"elsewhere-{i}" for i in range(30)],
                              "label": 1.0})
        folder = tmp_path / "new"
        folder.mkdir()
        qs = pd.read_parquet(zoo / "questions.parquet")
        pd.concat([qs, pd.DataFrame({"question_id": stray.question_id, "benchmark": "x", "text": "t"})]) \
            .to_csv(folder / "questions.csv", index=False)
        pd.concat([rows, stray]).to_csv(folder / "responses.csv", index=False)
        pd.DataFrame({"model": ["new-synthetic-llm-00"], "params_b": [3.5]}).to_csv(folder / "models.csv", index=False)
        # a run cut short: one LLM's fit already in the state file
        work, _ = plan_work(space, folder, replace=False)
        state = state_path("models:/zoo", 1, folder)
        state.parent.mkdir(parents=True, exist_ok=True)
        dirs, priors = directions(space, space.question_embeddings), member_priors(space, "")
        state.write_text(json.dumps(_fit_chunk(dirs, priors, work[:1])[0]) + "\n" + '{"llm": "cut')
        r = runner.invoke(app, ["onboard", "--from-data", str(folder), "--space", "models:/zoo@champion",
                                "--promote", "--json"])
        assert r.exit_code == 0, r.output
        report = json.loads(r.output[r.output.index("{"):])
        assert report["skipped"] == [{"llm": "new-stray", "reason": "none of its answers is to a question of the "
                                                                    "space"}]
        assert report["questions_not_in_space"] == 30 and report["resumed"] == 1 and report["onboarded"] == 6
        assert report["version"] == 2 and report["promoted"] == "models:/zoo@champion"
        served = jr.Space.load("models:/zoo@champion")
        assert served.model_names[:11] == space.model_names and len(served.model_names) == 17
        assert served.metadata["llms"]["new-synthetic-llm-00"] == {"params_b": 3.5}
        assert served.metadata["onboarded"]["new-synthetic-llm-03"]["responses"] > 200
        assert (served.answers[11:] != NOT_ANSWERED).sum(1).min() > 200
        # the fitted vectors predict the new LLMs' own answers better than chance
        p = served.predict_proba(served.question_embeddings)
        col = served.model_names.index("new-synthetic-llm-02")
        mine = rows[rows.model == "new-synthetic-llm-02"]
        idx = [served.question_ids.index(q) for q in mine.question_id]
        assert np.mean((p[idx, col] > 0.5) == (mine.label.to_numpy() > 0.5)) > 0.6
        # again: every LLM is known now; nothing to do, nothing registered
        r = runner.invoke(app, ["onboard", "--from-data", str(folder), "--space", "models:/zoo@champion"])
        assert r.exit_code == 0, r.output
        assert "6 LLM(s) of the folder are already in the space" in r.output and "nothing was registered" in r.output
        r = runner.invoke(app, ["onboard", "--from-data", str(folder), "--space", str(tmp_path / "nowhere")])
        assert r.exit_code == 2 and "needs a registered space" in r.output
