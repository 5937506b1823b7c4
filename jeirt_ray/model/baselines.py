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
    embeddings), falling back to the model's mean where no neighbour has its label.

    Its state is arrays only (`to_arrays`/`from_arrays`): the unit embeddings of the training
    questions and their label sums and counts, so a router can carry it to serving."""

    name = "knn"

    def __init__(self, k: int = 20):
        self.k = k
        self.X: np.ndarray | None = None  # unit embeddings of every question of the dataset (row queries)

    def fit(self, X: np.ndarray, n_models: int, q, m, y) -> "KNN":
        self.X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        self.train_rows = np.unique(q)
        self.base = self.X[self.train_rows]
        labels, counts = _label_matrices(len(X), n_models, q, m, y)
        self.labels, self.counts = labels[self.train_rows], counts[self.train_rows]
        self.prior = Majority().fit(n_models, q, np.asarray(m), np.asarray(y)).rate
        return self

    def _nearest(self, xq: np.ndarray, k: int, exclude: np.ndarray | None = None, chunk: int = 2048) -> np.ndarray:
        """Indices (into the training questions) of the k nearest to unit vectors xq, nearest
        first; with `exclude` (dataset rows of the queries), never the query itself."""
        out = np.empty((len(xq), k), dtype=np.int64)
        for i in range(0, len(xq), chunk):
            sims = xq[i:i + chunk] @ self.base.T
            if exclude is not None:
                sims[exclude[i:i + chunk, None] == self.train_rows[None, :]] = -np.inf
            top = np.argpartition(-sims, k, axis=1)[:, :k] if k < sims.shape[1] else \
                np.tile(np.arange(sims.shape[1]), (len(sims), 1))
            order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
            out[i:i + chunk] = np.take_along_axis(top, order, axis=1)
        return out

    def neighbours(self, question_rows: np.ndarray, k: int) -> np.ndarray:
        """The k nearest training questions of dataset rows (never the question itself)."""
        return self._nearest(self.X[question_rows], k, exclude=np.asarray(question_rows))

    def neighbours_of(self, x: np.ndarray, k: int) -> np.ndarray:
        """The k nearest training questions of new embeddings (queries at serving time)."""
        return self._nearest(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12), k)

    def similarities(self, x: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
        """(n, k) cosine similarity of new embeddings to their neighbours `nbrs`."""
        xu = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return np.einsum("nd,nkd->nk", xu, self.base[nbrs])

    def rates(self, nbrs: np.ndarray) -> np.ndarray:
        """(n, n_models) smoothed mean label over each row of neighbours."""
        n, k = nbrs.shape
        W = sp.csr_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), nbrs.ravel())), shape=(n, self.labels.shape[0]))
        sums = (W @ self.labels).toarray()
        counts = (W @ self.counts).toarray()
        return np.where(counts > 0, (sums + self.prior) / (counts + 1.0), self.prior)

    def predict_all(self, question_rows: np.ndarray, k: int | None = None, nbrs: np.ndarray | None = None) -> np.ndarray:
        k = k or self.k
        return self.rates(self.neighbours(question_rows, k) if nbrs is None else nbrs[:, :k])

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

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as plain arrays (label sums and counts as CSR parts: sparse at any scale)."""
        out = {"base": self.base.astype(np.float32), "prior": self.prior.astype(np.float64), "k": np.array([self.k])}
        for name, mat in (("labels", self.labels), ("counts", self.counts)):
            mat = sp.csr_matrix(mat)
            out |= {f"{name}.data": mat.data.astype(np.float32), f"{name}.indices": mat.indices.astype(np.int64),
                    f"{name}.indptr": mat.indptr.astype(np.int64), f"{name}.shape": np.array(mat.shape)}
        return out

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "KNN":
        knn = cls(int(a["k"][0]))
        knn.base, knn.prior = a["base"], a["prior"]
        knn.labels, knn.counts = (sp.csr_matrix((a[f"{n}.data"], a[f"{n}.indices"], a[f"{n}.indptr"]),
                                                shape=tuple(a[f"{n}.shape"])) for n in ("labels", "counts"))
        knn.train_rows = np.arange(len(knn.base))
        return knn
