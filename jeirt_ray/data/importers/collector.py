"""The shared collector every importer fills: questions and labels as they are read, skipped
items with where and why, and the Git LFS pointer check."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..dataset import ResponseData
from ..errors import DataError


@dataclass
class Collector:
    """Questions and labels as they are read: ids interned to integers, labels in compact arrays
    (12 bytes a response), so memory grows with the responses, not with the files' size."""

    question_pos: dict[str, int] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    model_pos: dict[str, int] = field(default_factory=dict)
    m: array = field(default_factory=lambda: array("i"))
    q: array = field(default_factory=lambda: array("i"))
    y: array = field(default_factory=lambda: array("f"))
    skipped: list[str] = field(default_factory=list)
    files: int = 0
    name_sources: dict[str, str] = field(default_factory=dict)  # model -> where its name came from
    notes: list[str] = field(default_factory=list)  # choices made for the whole import

    def question(self, qid: str, benchmark: str, text: str) -> int:
        pos = self.question_pos.get(qid)
        if pos is None:
            pos = self.question_pos[qid] = len(self.texts)
            self.texts.append(text)
            self.benchmarks.append(benchmark)
        return pos

    def add(self, model: str, question: int, label: float) -> None:
        self.m.append(self.model_pos.setdefault(model, len(self.model_pos)))
        self.q.append(question)
        self.y.append(label)

    def skip(self, problem: str, **where) -> None:
        self.skipped.append(str(DataError(problem, **where)))

    def to_data(self, name: str, mapping: dict[str, str] | None = None) -> tuple[ResponseData, dict]:
        """(the dataset, per model: labels read and kept, duplicates dropped, the names merged into
        it and where its name came from). The same (model, question) read twice keeps the label
        read last: runs are read oldest first, so that is the latest run's."""
        if not self.y:
            raise DataError("nothing could be imported" + (f"; skipped: {self.skipped[:3]}" if self.skipped else ""))
        names = list(self.model_pos)
        canonical = [(mapping or {}).get(n, n) for n in names]
        models = np.array(sorted(set(canonical)), dtype=str)
        remap = np.searchsorted(models, np.array(canonical, dtype=str))
        m = remap[np.frombuffer(self.m, dtype=np.int32)]
        q = np.frombuffer(self.q, dtype=np.int32).astype(np.int64)
        y = np.frombuffer(self.y, dtype=np.float32).copy()
        key = m.astype(np.int64) * len(self.texts) + q
        _, last = np.unique(key[::-1], return_index=True)
        keep = np.sort(len(key) - 1 - last)
        read, kept = np.bincount(m, minlength=len(models)), np.bincount(m[keep], minlength=len(models))
        merged: dict[str, list[str]] = defaultdict(list)
        for n, c in zip(names, canonical):
            merged[c].append(n)
        per_model = {str(mod): {"labels_read": int(read[i]), "labels_kept": int(kept[i]),
                                "duplicates_dropped": int(read[i] - kept[i]),
                                "names": sorted(merged[str(mod)]),
                                "name_from": sorted({self.name_sources.get(n, "the source") for n in merged[str(mod)]})}
                     for i, mod in enumerate(models)}
        ids = np.array(list(self.question_pos), dtype=str)
        data = ResponseData(question_ids=ids, benchmarks=np.array(self.benchmarks, dtype=str),
                            texts=np.array(self.texts, dtype=str), models=models, q_idx=q[keep],
                            m_idx=m[keep].astype(np.int64), labels=y[keep], name=name)
        return data, per_model


def place_of(path: Path | str, n: int | None) -> dict:
    """DataError's location of the n-th record: a line of a JSON-lines file, else a record."""
    if n is None:
        return {"file": str(path)}
    return {"file": str(path), ("record" if str(path).endswith(".parquet") else "line"): n}


LFS_POINTER = b"version https://git-lfs.github.com/spec/"
LFS_FIX = "a Git LFS pointer, not the data: run `git lfs pull` in the repository it came from"


def is_lfs_pointer(path: Path) -> bool:
    """A ~130-byte Git LFS stub (`version https://git-lfs.github.com/spec/v1`, `oid sha256:...`,
    `size ...`) checked out in place of the file."""
    try:
        with path.open("rb") as f:
            return f.read(len(LFS_POINTER)) == LFS_POINTER
    except OSError:
        return False


def label_value(value, where: dict, metric: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not np.isfinite(value) or not 0 <= value <= 1:
        raise DataError("the label metric is not a number in [0, 1]", **where, column=metric, value=value)
    return float(value)
