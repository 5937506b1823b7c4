"""End-to-end training: the encoder's top K transformer layers with JE-IRT's (or MF's) head.

The encoder is split at layer L-K. The layers below stay frozen: their output for every question
is computed once and cached (encoders/hidden.py), so an epoch runs only the top K layers, mean
pooling and normalisation (`EncoderTop`) under the head (`FineTuned`). The encoder's layers take
a smaller learning rate than the head; early stopping on validation loss picks the epoch, as for
any member (`train.fit`, also under Ray Train's DDP).

The result is saved as a complete sentence-transformers folder (the base with its top K layers
replaced, safetensors), so everything after it (the embedding cache, the configuration search
and ensemble, onboarding, serving) uses it as an encoder like any other; a space trained on it
carries it (Space.encoder_dir) into the registry and the Serve Encoder.
"""

from __future__ import annotations

import copy
import functools
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from .modules import build_module
from .token_states import TokenBatch, TokenStates
from .train import FitResult, Pairs, TrainConfig, fit


def parse_layers(text: str) -> int | Literal["all"]:
    """'top-2' -> 2, 'all' -> 'all'; a ValueError naming the accepted forms otherwise."""
    if text == "all":
        return "all"
    m = re.fullmatch(r"top-(\d+)", text)
    if not m or int(m[1]) < 1:
        raise ValueError(f"--finetune takes top-K (K >= 1, e.g. top-2) or all, not {text!r}")
    return int(m[1])


class FinetuneSettings(BaseModel):
    layers: int | Literal["all"] = Field(2, description="the top K transformer layers train, or all of them")
    encoder_lr: float = Field(3e-5, gt=0, description="learning rate of the encoder's layers")
    max_epochs: int = Field(6, ge=1)
    patience: int = Field(2, ge=1)
    question_batch: int = Field(64, ge=1, description="distinct questions per step")


class EncoderTop(nn.Module):
    """The trainable top of a sentence-transformers encoder: transformer layers from `first` on
    (with the encoder module's own glue, e.g. MPNet's relative position bias), mean pooling and
    L2 normalisation."""

    def __init__(self, st_model, first: int):
        super().__init__()
        auto = st_model[0].auto_model
        self.config = auto.config
        pooling = getattr(st_model[1], "pooling_mode", None) if len(st_model) > 1 else None
        if pooling != "mean":
            raise ValueError(f"fine-tuning needs a mean-pooling sentence-transformers encoder (this one pools "
                             f"by {pooling!r})")
        self.normalize = any(type(m).__name__ == "Normalize" for m in st_model)
        self.encoder = copy.deepcopy(auto.encoder)
        self.encoder.layer = self.encoder.layer[first:]
        for p in self.encoder.parameters():  # shared glue below the layers stays frozen
            p.requires_grad_(False)
        for p in self.encoder.layer.parameters():
            p.requires_grad_(True)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        hidden, mask = batch
        attention = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=mask)
        out = self.encoder(hidden, attention_mask=attention)
        tokens = out[0] if isinstance(out, tuple) else out.last_hidden_state
        m = mask.unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled


class FineTuned(nn.Module):
    """A head (JE-IRT or MF, same calling convention as modules.py) on the trainable encoder top;
    its input is a TokenBatch instead of frozen embeddings."""

    def __init__(self, top: EncoderTop, head: nn.Module, encoder_lr: float):
        super().__init__()
        self.top, self.head, self.encoder_lr = top, head, encoder_lr
        self.kind = head.kind

    def forward(self, x: TokenBatch, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return self.head(self.top(x), q, m)

    def score_all(self, x: TokenBatch) -> torch.Tensor:
        return self.head.score_all(self.top(x))

    def param_groups(self, lr: float) -> list[dict]:
        """The head at the trainer's learning rate, the encoder's layers at `encoder_lr`."""
        return [{"params": list(self.head.parameters()), "lr": lr},
                {"params": [p for p in self.top.parameters() if p.requires_grad], "lr": self.encoder_lr}]


def build(st_model, first: int, config: TrainConfig, n_models: int, encoder_lr: float) -> FineTuned:
    top = EncoderTop(st_model, first)
    head = build_module(config.kind, top.config.hidden_size, n_models, **config.model_dump(exclude={"kind"}))
    return FineTuned(top, head, encoder_lr)


def save_encoder(st_model, top: EncoderTop, first: int, folder: str | Path) -> Path:
    """The base encoder with its layers from `first` on replaced by the trained ones, as a
    sentence-transformers folder (safetensors)."""
    tuned = copy.deepcopy(st_model)
    layers = tuned[0].auto_model.encoder.layer
    for i, layer in enumerate(top.encoder.layer):
        layers[first + i].load_state_dict(layer.state_dict())
    folder = Path(folder)
    from transformers.utils import logging as hf_logging
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar
    try:
        tuned.save(str(folder), safe_serialization=True, create_model_card=False)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return folder


@dataclass
class Finetuned:
    folder: Path  # the fine-tuned sentence-transformers encoder
    report: dict  # what was trained and how it went, kept in the space's metadata


def finetune_encoder(base: str, texts: list[str], n_models: int, train: Pairs, val: Pairs, head: TrainConfig,
                     settings: FinetuneSettings, folder: str | Path, cache_root: str | Path | None,
                     fit_fn: Callable[..., FitResult] = fit, progress: bool = True) -> Finetuned:
    """Train the top layers of encoder `base` with a `head` configuration on the given pairs
    (rows of `texts`), early-stopped on `val`; save the encoder to `folder`."""
    from ..encoders import make_encoder
    from ..encoders.hidden import bottom_states, cached_bottom_states, layer_count
    encoder = make_encoder(base)
    if not hasattr(encoder, "model"):
        raise ValueError(f"--finetune needs a sentence-transformers encoder, not {base!r}")
    if getattr(encoder, "precision", "fp32") != "fp32":
        raise ValueError(f"--finetune trains the fp32 encoder; drop the +{encoder.precision} of {base!r}")
    st_model = encoder.model  # on a GPU when there is one: the frozen bottom runs there
    n_layers = layer_count(st_model)
    k = n_layers if settings.layers == "all" else settings.layers
    if k > n_layers:
        raise ValueError(f"--finetune top-{k}: {base!r} has {n_layers} transformer layers")
    first = n_layers - k
    start = time.perf_counter()
    if cache_root is None:
        states = bottom_states(st_model, list(texts), first)
    else:
        states = cached_bottom_states(st_model, encoder.encoder_id, list(texts), first, cache_root, progress=progress)
    X = TokenStates.from_list(states)
    cached_s = time.perf_counter() - start
    st_model.cpu()  # the module is built (and shipped to Ray Train's workers) from CPU weights
    config = head.model_copy(update={"max_epochs": settings.max_epochs, "patience": settings.patience,
                                     "question_batch": settings.question_batch, "schedule": "cosine"})
    module = build(st_model, first, config, n_models, settings.encoder_lr)
    if fit_fn is fit and torch.cuda.is_available():
        fit_fn = functools.partial(fit, device="cuda")
    result = fit_fn(X, n_models, train, val, config, module=module, progress=progress)
    save_encoder(st_model, result.module.top, first, folder)
    report = {"base_encoder": encoder.encoder_id, "layers": k, "of_layers": n_layers, "kind": config.kind,
              "encoder_lr": settings.encoder_lr, "head_config": config.model_dump(),
              "best_val_loss": result.best_val_loss, "best_epoch": result.best_epoch, "epochs": result.epochs,
              "hidden_state_seconds": cached_s, "train_seconds": result.seconds, **result.notes}
    return Finetuned(Path(folder), report)
