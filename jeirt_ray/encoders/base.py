"""What every question encoder provides."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class QuestionEncoder(Protocol):
    encoder_id: str  # stable name used as the cache key; changes whenever the vectors would
    dim: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """(len(texts), dim) float32 array."""
        ...
