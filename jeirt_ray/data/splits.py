"""Seeded train/validation/test splits over the sparse responses, saved as JSON with each run.

- by question (EmbedLLM's protocol): 80/10/10 of the questions; every response to a test
  question is a test response, so test questions are never seen in training;
- by model: some LLMs are held out whole (for onboarding), the rest split by question;
- leave one benchmark out: a benchmark's questions are the test set, the rest train/val.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .dataset import ResponseData


@dataclass
class Split:
    kind: str
    seed: int
    question_part: np.ndarray  # (Q,) int8: 0 train, 1 val, 2 test
    heldout_models: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def masks(self, data: ResponseData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Boolean masks over data's responses: (train, val, test). Held-out models' responses
        are excluded from train and val (they belong to the onboarding evaluation)."""
        part = self.question_part[data.q_idx]
        held = np.isin(data.models[data.m_idx], self.heldout_models)
        return (part == 0) & ~held, (part == 1) & ~held, (part == 2) & ~held

    def questions(self, which: int) -> np.ndarray:
        return np.flatnonzero(self.question_part == which)

    def to_json(self, data: ResponseData) -> dict:
        return {"kind": self.kind, "seed": self.seed, "data_fingerprint": data.fingerprint(),
                "heldout_models": list(self.heldout_models), "info": self.info,
                **{name: data.question_ids[self.question_part == i].tolist()
                   for i, name in enumerate(("train_questions", "val_questions", "test_questions"))}}

    def save(self, path: str | Path, data: ResponseData) -> None:
        Path(path).write_text(json.dumps(self.to_json(data)))

    @classmethod
    def load(cls, path: str | Path, data: ResponseData) -> "Split":
        obj = json.loads(Path(path).read_text())
        part = np.full(data.n_questions, -1, dtype=np.int8)
        index = {q: i for i, q in enumerate(data.question_ids)}
        for i, name in enumerate(("train_questions", "val_questions", "test_questions")):
            part[[index[q] for q in obj[name]]] = i
        if (part < 0).any() and obj["kind"] != "given":  # a user's own split may leave questions out
            raise ValueError(f"{path}: split does not cover question {data.question_ids[part < 0][0]!r}")
        return cls(obj["kind"], obj["seed"], part, obj.get("heldout_models", []), obj.get("info", {}))


def assign_parts(n: int, fractions: tuple[float, float, float], rng: np.random.Generator) -> np.ndarray:
    """The part (0 train, 1 validation, 2 test) of each of `n` items, in random order by `fractions`."""
    order = rng.permutation(n)
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    part = np.full(n, 2, dtype=np.int8)
    part[order[:n_train]] = 0
    part[order[n_train:n_train + n_val]] = 1
    return part


def split_by_question(data: ResponseData, seed: int = 0,
                      fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> Split:
    rng = np.random.default_rng(seed)
    return Split("by_question", seed, assign_parts(data.n_questions, fractions, rng), info={"fractions": fractions})


def split_by_model(data: ResponseData, n_heldout: int, seed: int = 0,
                   fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> Split:
    if not 0 < n_heldout < data.n_models:
        raise ValueError(f"n_heldout must be between 1 and {data.n_models - 1}, got {n_heldout}")
    rng = np.random.default_rng(seed)
    held = sorted(rng.choice(data.models, size=n_heldout, replace=False).tolist())
    split = Split("by_model", seed, assign_parts(data.n_questions, fractions, rng), heldout_models=held,
                  info={"fractions": fractions})
    return split


def split_leave_benchmark_out(data: ResponseData, benchmark: str, seed: int = 0,
                              val_fraction: float = 0.1) -> Split:
    if benchmark not in set(data.benchmarks):
        raise ValueError(f"unknown benchmark {benchmark!r}; known: {sorted(set(data.benchmarks))}")
    rng = np.random.default_rng(seed)
    out = data.benchmarks == benchmark
    part = np.full(data.n_questions, 2, dtype=np.int8)
    rest = np.flatnonzero(~out)
    order = rng.permutation(rest)
    n_val = int(round(val_fraction * len(rest)))
    part[order[:n_val]] = 1
    part[order[n_val:]] = 0
    return Split("leave_benchmark_out", seed, part, info={"benchmark": benchmark})


SPLIT_NAMES = {"train": 0, "val": 1, "validation": 1, "test": 2}


def split_from_table(table, data: ResponseData, origin: str = "split table") -> Split:
    """A user's own split: a DataFrame with columns `question_id` and `split` (train, val or
    test; `validation` is read as val). Questions it does not list take part in nothing;
    it must give at least one training and one validation question."""
    import pandas as pd
    from .errors import DataError
    missing = [c for c in ("question_id", "split") if c not in table.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; found {list(table.columns)} (expected question_id,split)",
                        file=origin)
    index = pd.Index(data.question_ids)
    qids = table["question_id"].astype(str).to_numpy()
    rows = index.get_indexer(qids)
    if (rows < 0).any():
        i = int(np.flatnonzero(rows < 0)[0])
        raise DataError("question_id not in the dataset", file=origin, row=i + 1, column="question_id", value=qids[i])
    names = table["split"].astype(str).str.strip().str.lower().to_numpy()
    bad = ~np.isin(names, list(SPLIT_NAMES))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError("split must be train, val or test", file=origin, row=i + 1, column="split",
                        value=table["split"].iloc[i])
    dup = pd.Index(qids).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise DataError("question listed twice", file=origin, row=i + 1, column="question_id", value=qids[i])
    part = np.full(data.n_questions, -1, dtype=np.int8)
    part[rows] = [SPLIT_NAMES[n] for n in names]
    for which, name in ((0, "train"), (1, "val")):
        if not (part == which).any():
            raise DataError(f"no {name} question: a split needs training and validation questions", file=origin)
    return Split("given", 0, part, info={"source": origin, "unlisted_questions": int((part < 0).sum())})


def read_split(split, data: ResponseData) -> Split:
    """`split` as a Split; a DataFrame or a CSV/Parquet file of question_id,split; or a
    split.json that a run saved."""
    import pandas as pd
    if isinstance(split, Split):
        return split
    if isinstance(split, pd.DataFrame):
        return split_from_table(split, data, "split table")
    path = Path(split)
    if path.suffix == ".json":
        return Split.load(path, data)
    from .tables import read_table
    return split_from_table(read_table(path), data, str(path))
