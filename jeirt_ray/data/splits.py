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
    def load(cls, path: str | Path, data: ResponseData, partial: bool = False) -> "Split":
        """A split.json that a run saved, for the same dataset (its fingerprint is checked)."""
        from .errors import DataError
        try:
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
            lists = [obj[name] for name in ("train_questions", "val_questions", "test_questions")]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise DataError(f"not a split.json that jeirt saved ({type(e).__name__}: {e})", file=str(path)) from None
        saved = obj.get("data_fingerprint")
        if saved is not None and saved != data.fingerprint():
            raise DataError(f"this split was saved for another dataset (fingerprint {saved}; {data.name} has "
                            f"{data.fingerprint()}): pass a split made for this data, or none", file=str(path))
        part = np.full(data.n_questions, -1, dtype=np.int8)
        index = {q: i for i, q in enumerate(data.question_ids)}
        for i, ids in enumerate(lists):
            unknown = [q for q in ids if q not in index]
            if unknown:
                raise DataError(f"question_id not in the dataset {data.name}: the split belongs to other data",
                                file=str(path), value=unknown[0])
            part[[index[q] for q in ids]] = i
        if (part < 0).any() and obj["kind"] != "given":
            raise DataError(f"split does not cover question {data.question_ids[part < 0][0]!r}", file=str(path))
        split = cls(obj["kind"], obj["seed"], part, obj.get("heldout_models", []), obj.get("info", {}))
        if obj["kind"] == "given":
            check_coverage(split, data, str(path), partial)
        return split


UNLISTED_FIX = "list them, or pass partial_split=True (--partial-split) to train and test on the listed ones only"


def check_coverage(split: "Split", data: ResponseData, origin: str, partial: bool) -> None:
    """A user's split that leaves questions out is refused unless `partial` (asked for)."""
    from .errors import DataError
    unlisted = int((split.question_part < 0).sum())
    if unlisted and not partial:
        raise DataError(f"the split lists {data.n_questions - unlisted} of the {data.n_questions} questions: "
                        f"{unlisted} would take part in nothing; {UNLISTED_FIX}", file=origin)


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


def split_from_table(table, data: ResponseData, origin: str = "split table", partial: bool = False) -> Split:
    """A user's own split: a DataFrame with columns `question_id` and `split` (train, val or
    test; `validation` is read as val). It must list every question, unless `partial`: then
    the questions it does not list take part in nothing. It must give at least one training
    and one validation question."""
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
    split = Split("given", 0, part, info={"source": origin, "unlisted_questions": int((part < 0).sum())})
    check_coverage(split, data, origin, partial)
    return split


def read_split(split, data: ResponseData, partial: bool = False) -> Split:
    """`split` as a Split; a DataFrame or a CSV/Parquet file of question_id,split; or a
    split.json that a run saved. A user's split that leaves questions out is refused unless
    `partial` (then the unlisted questions take part in nothing)."""
    import pandas as pd
    if isinstance(split, Split):
        return split
    if isinstance(split, pd.DataFrame):
        return split_from_table(split, data, "split table", partial)
    path = Path(split)
    if path.suffix == ".json":
        return Split.load(path, data, partial)
    from .tables import read_table
    return split_from_table(read_table(path), data, str(path), partial)
