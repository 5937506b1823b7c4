"""Non-parametric baselines behind the same predict_proba(question_rows, models) interface."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _label_matrices(n_questions: int, n_models: int, q, m, y) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Sparse (questions x models) label sums and observation counts."""
    labels = sp.csr_matrix((np.asarray(y, dtype=np.float64), (q, m)), shape=(n_questions, n_models))
    counts = sp.csr_matrix((np.ones(len(q)), (q, m)), shape=(n_questions, n_models))
    return labels, counts


class Majority:
    """Each model's mean training label (a per-model prior, blind to the question)."""

    name = "majority"

    def fit(self, n_models: int, q, m, y) -> "Majority":
        sums = np.bincount(m, weights=y, minlength=n_models)
        counts = np.bincount(m, minlength=n_models)
        self.rate = (sums + 0.5) / (counts + 1.0)
        return self

    def predict_all(self, question_rows: np.ndarray) -> np.ndarray:
        return np.tile(self.rate, (len(question_rows), 1))


class KNN:
    """Mean label of each model over the k nearest training questions (cosine on the frozen
    embeddings), falling back to the model's mean where no neighbour has its label."""

    name = "knn"

    def __init__(self, k: int = 20):
        self.k = k

    def fit(self, X: np.ndarray, n_models: int, q, m, y) -> "KNN":
        self.X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        self.train_rows = np.unique(q)
        self.labels, self.counts = _label_matrices(len(X), n_models, q, m, y)
        self.prior = Majority().fit(n_models, q, np.asarray(m), np.asarray(y)).rate
        return self

    def neighbours(self, question_rows: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
        """Indices (into self.train_rows) of the k nearest training questions, nearest first,
        never the question itself."""
        base = self.X[self.train_rows]
        out = np.empty((len(question_rows), k), dtype=np.int64)
        for i in range(0, len(question_rows), chunk):
            rows = question_rows[i:i + chunk]
            sims = self.X[rows] @ base.T
            sims[rows[:, None] == self.train_rows[None, :]] = -np.inf
            top = np.argpartition(-sims, k, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
            out[i:i + chunk] = np.take_along_axis(top, order, axis=1)
        return out

    def predict_all(self, question_rows: np.ndarray, k: int | None = None, nbrs: np.ndarray | None = None) -> np.ndarray:
        k = k or self.k
        nbrs = self.neighbours(question_rows, k) if nbrs is None else nbrs[:, :k]
        n = len(question_rows)
        W = sp.csr_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), self.train_rows[nbrs].ravel())),
                          shape=(n, self.labels.shape[0]))
        sums = (W @ self.labels).toarray()
        counts = (W @ self.counts).toarray()
        return np.where(counts > 0, (sums + self.prior) / (counts + 1.0), self.prior)

    def select_k(self, val_rows: np.ndarray, val_q, val_m, val_y, ks=(5, 10, 20, 50, 100)) -> int:
        """Choose k by validation log-loss."""
        ks = [k for k in ks if k < len(self.train_rows)] or [1]
        nbrs = self.neighbours(val_rows, max(ks))
        pos = {r: i for i, r in enumerate(val_rows)}
        qi = np.array([pos[r] for r in val_q])
        best = None
        for k in ks:
            p = np.clip(self.predict_all(val_rows, k, nbrs)[qi, val_m], 1e-6, 1 - 1e-6)
            loss = -np.mean(val_y * np.log(p) + (1 - val_y) * np.log(1 - p))
            if best is None or loss < best[0]:
                best = (loss, k)
        self.k = best[1]
        return self.k
