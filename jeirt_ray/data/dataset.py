"""The in-memory response dataset: questions, models and a sparse list of observed labels.

Responses are stored as three parallel arrays (question index, model index, label); nothing is
ever padded to a dense models x questions matrix, because real evaluation data is sparse.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


@dataclass
class ResponseData:
    question_ids: np.ndarray  # (Q,) str
    benchmarks: np.ndarray  # (Q,) str
    texts: np.ndarray  # (Q,) str
    models: np.ndarray  # (M,) str
    q_idx: np.ndarray  # (P,) int64, index into questions
    m_idx: np.ndarray  # (P,) int64, index into models
    labels: np.ndarray  # (P,) float32 in [0, 1]
    name: str = "data"
    synthetic: bool = False
    extra: dict = field(default_factory=dict)  # e.g. the synthetic generator's true parameters

    @property
    def n_questions(self) -> int:
        return len(self.question_ids)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_responses(self) -> int:
        return len(self.labels)

    def describe(self) -> str:
        kind = "SYNTHETIC " if self.synthetic else ""
        density = self.n_responses / max(1, self.n_models * self.n_questions)
        return (f"{kind}dataset {self.name!r}: {self.n_models} models x {self.n_questions} questions, "
                f"{self.n_responses} labels ({density:.1%} observed), "
                f"{len(np.unique(self.benchmarks))} benchmarks")

    def fingerprint(self) -> str:
        """A short hash of the content, saved with every run so results name the data they used."""
        h = hashlib.sha256()
        for arr in (self.question_ids, self.models):
            h.update("\x1f".join(map(str, arr)).encode())
        for arr in (self.q_idx, self.m_idx, self.labels):
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]

    def subset_responses(self, mask: np.ndarray) -> "ResponseData":
        """The same questions and models with only the responses where mask is true."""
        return ResponseData(self.question_ids, self.benchmarks, self.texts, self.models,
                            self.q_idx[mask], self.m_idx[mask], self.labels[mask],
                            name=self.name, synthetic=self.synthetic, extra=self.extra)

    def label_matrix(self, question_rows: np.ndarray | None = None) -> np.ndarray:
        """Dense (questions x models) matrix with NaN where unobserved, for evaluation only."""
        rows = np.arange(self.n_questions) if question_rows is None else np.asarray(question_rows)
        pos = np.full(self.n_questions, -1, dtype=np.int64)
        pos[rows] = np.arange(len(rows))
        out = np.full((len(rows), self.n_models), np.nan, dtype=np.float32)
        keep = pos[self.q_idx] >= 0
        out[pos[self.q_idx[keep]], self.m_idx[keep]] = self.labels[keep]
        return out

    # ---- Parquet on disk -------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"question_id": self.question_ids.astype(str),
                                 "benchmark": self.benchmarks.astype(str),
                                 "text": self.texts.astype(str)}), d / "questions.parquet")
        pq.write_table(pa.table({"model": self.models[self.m_idx].astype(str),
                                 "question_id": self.question_ids[self.q_idx].astype(str),
                                 "label": self.labels.astype(np.float32)}), d / "responses.parquet")
        return d

    @classmethod
    def from_frames(cls, questions: pd.DataFrame, responses: pd.DataFrame, *, name: str,
                    synthetic: bool = False, models: list[str] | None = None,
                    validated: bool = False) -> "ResponseData":
        """Build from frames with the columns of the long format (questions: question_id,
        benchmark, text; responses: model, question_id, label). They are checked as the folder
        loader checks files (labels in [0, 1], no empty ids, no response to an unknown question,
        no (model, question) pair twice: a DataError naming the row, column and value) unless
        `validated` says a loader did it already."""
        if not validated:
            from .validate import validate_questions, validate_responses
            questions = validate_questions(questions, "questions frame")
            responses = validate_responses(responses, pd.Index(questions["question_id"].astype(str)),
                                           "responses frame")
        qids = questions["question_id"].to_numpy(dtype=object).astype(str)
        qpos = pd.Index(qids)
        model_names = (np.array(models, dtype=str) if models is not None
                       else np.array(sorted(pd.unique(responses["model"].astype(str))), dtype=str))
        mpos = pd.Index(model_names)
        return cls(question_ids=qids,
                   benchmarks=questions["benchmark"].to_numpy(dtype=object).astype(str),
                   texts=questions["text"].to_numpy(dtype=object).astype(str),
                   models=model_names,
                   q_idx=qpos.get_indexer(responses["question_id"].astype(str)).astype(np.int64),
                   m_idx=mpos.get_indexer(responses["model"].astype(str)).astype(np.int64),
                   labels=responses["label"].to_numpy(dtype=np.float32),
                   name=name, synthetic=synthetic)
