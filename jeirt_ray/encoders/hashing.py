"""A deterministic bag-of-words hashing encoder: no weights, instant, for tests and demos."""

from __future__ import annotations

import hashlib
import re

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")


class HashingEncoder:
    """Signed feature hashing of word unigrams and bigrams, L2-normalised."""

    def __init__(self, dim: int = 384):
        self.dim = dim
        self.encoder_id = f"hashing-{dim}"

    def _bucket(self, token: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        return h % self.dim, 1.0 if (h >> 63) & 1 else -1.0

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = _TOKEN.findall(text.lower())
            for tok in words + [a + " " + b for a, b in zip(words, words[1:])]:
                j, sign = self._bucket(tok)
                out[i, j] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)
