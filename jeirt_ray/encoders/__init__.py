"""Question encoders: the frozen text side of JE-IRT."""

from __future__ import annotations

from .base import QuestionEncoder
from .cache import EmbeddingCache, encode_cached, text_hash
from .hashing import HashingEncoder
from .sentence import DEFAULT_ENCODER, SentenceTransformerEncoder, split_precision


def make_encoder(spec: str = DEFAULT_ENCODER) -> QuestionEncoder:
    """'hashing' or 'hashing-<dim>' for the hashing encoder; anything else is a
    sentence-transformers model name or path (default: the bundled all-MiniLM-L6-v2), optionally
    with a precision suffix: '+int8', '+onnx' or '+onnx-int8' (CPU), '+bf16' or '+fp16' (GPU)."""
    if spec == "hashing" or spec.startswith("hashing-"):
        dim = int(spec.split("-", 1)[1]) if "-" in spec else 384
        return HashingEncoder(dim)
    name, precision = split_precision(spec)
    return SentenceTransformerEncoder(name, precision=precision)


__all__ = ["QuestionEncoder", "EmbeddingCache", "encode_cached", "text_hash", "HashingEncoder",
           "SentenceTransformerEncoder", "DEFAULT_ENCODER", "make_encoder"]
