"""Benchmark centroids: the unit mean direction of each benchmark's questions in the frozen
encoder's space, and the one nearest a query: how a router tells a query's benchmark (to expect
its answer length), the same way in the served router and in the studies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero)."""
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)


@dataclass
class Centroids:
    names: list[str]  # sorted
    vectors: np.ndarray  # (B, d), unit rows

    @classmethod
    def fit(cls, x: np.ndarray, benchmarks) -> "Centroids":
        """From embeddings `x` (n, d) of questions and each one's benchmark."""
        bench = np.asarray(benchmarks)
        names = sorted(set(bench.tolist()))
        xs = unit(np.asarray(x, dtype=np.float64))
        return cls([str(b) for b in names], unit(np.stack([xs[bench == b].mean(0) for b in names])))

    def nearest(self, x: np.ndarray) -> list[str]:
        """The nearest benchmark (by cosine) of each row of `x`."""
        return [self.names[i] for i in (unit(np.asarray(x, dtype=np.float64)) @ self.vectors.T).argmax(1)]
