"""A sentence-transformers encoder run by ONNX Runtime on CPU (`NAME+onnx`, `NAME+onnx-int8`).

The transformer is exported once with torch's ONNX exporter (and, for `onnx-int8`, its weights
quantised to int8 per output channel by ONNX Runtime's dynamic quantisation) into the cache,
under the encoder's id; tokenisation, pooling and normalisation stay the sentence-transformers
model's own. Only Transformer + Pooling (mean or cls) [+ Normalize] models are exported; others
are refused, naming the fix. On this 2-core CPU `onnx-int8` encodes one question 2.9x faster
than PyTorch fp32 (one thread) (benchmarks/encode_precision.py, docs/results/finetune.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxSentenceModel:
    """What SentenceTransformerEncoder calls on a model: `encode(...)` and the embedding size."""

    def __init__(self, st_model, variant: str, cache_id: str, error: type[Exception]):
        try:
            import onnxruntime as ort
        except ImportError:
            raise error(f"+{variant} needs ONNX Runtime: pip install 'jeirt-ray[onnx]' (onnxruntime, onnx), "
                        f"or drop the +{variant}") from None
        names = [type(m).__name__ for m in st_model]
        pooling = getattr(st_model[1], "pooling_mode", None) if len(names) > 1 else None
        if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]) \
                or pooling not in ("mean", "cls"):
            raise error(f"+{variant} exports Transformer + Pooling (mean or cls) models; this one is "
                        f"{' + '.join(names)} (pooling {pooling!r}): drop the +{variant}")
        self.tokenizer, self.pooling = st_model.tokenizer, pooling
        self.max_length = st_model.max_seq_length
        self.dim = int(st_model[1].embedding_dimension)
        path = _exported(st_model, variant, cache_id)
        options = ort.SessionOptions()
        # as many threads as torch was given (the served encoder's `encoder_threads`)
        import torch
        options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts: list[str], batch_size: int = 64, convert_to_numpy: bool = True,
               normalize_embeddings: bool = False, show_progress_bar: bool = False) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="np")
            hidden = self.session.run(None, {k: batch[k].astype(np.int64) for k in self.inputs})[0]
            if self.pooling == "cls":
                vecs = hidden[:, 0]
            else:
                mask = batch["attention_mask"][..., None].astype(np.float32)
                vecs = (hidden * mask).sum(1) / mask.sum(1).clip(1e-9)
            if normalize_embeddings:
                vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True).clip(1e-12)
            out.append(vecs.astype(np.float32))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)


def _exported(st_model, variant: str, cache_id: str) -> Path:
    """The ONNX file of this encoder and variant in the cache, exported (and quantised) once."""
    import torch

    from ..core import paths
    folder = paths.cache_dir() / "onnx" / hashlib.sha256(cache_id.encode()).hexdigest()[:16]
    final = folder / f"{variant}.onnx"
    if final.exists():
        return final
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "onnx.onnx"
    model = st_model[0].auto_model.eval()
    sample = st_model.tokenizer(["a question", "another, longer question"], padding=True, return_tensors="pt")
    names = [k for k in INPUTS if k in sample]

    class Hidden(torch.nn.Module):  # the last hidden state, from positional inputs
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(**dict(zip(names, args))).last_hidden_state

    if not fp32.exists():
        tmp = folder / f".onnx.{os.getpid()}.onnx"
        with torch.no_grad(), warnings.catch_warnings():  # the exporter's tracer warnings say nothing to a user
            warnings.simplefilter("ignore")
            torch.onnx.export(Hidden(), tuple(sample[k] for k in names), str(tmp), input_names=names,
                              output_names=["hidden"], opset_version=17, dynamo=False,
                              dynamic_axes={k: {0: "batch", 1: "tokens"} for k in [*names, "hidden"]})
        tmp.replace(fp32)  # readers never see a half-written file
    if variant == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        tmp = folder / f".int8.{os.getpid()}.onnx"
        logging.disable(logging.WARNING)  # its advice to pre-process (shape inference) changes nothing here
        try:
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        tmp.replace(final)
    return final
