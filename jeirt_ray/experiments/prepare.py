"""One dataset, one split, its embeddings: the shared setup of evaluation, routing and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import ResponseData, Split, split_by_question
from ..encoders import QuestionEncoder, encode_cached
from ..model.train import Pairs


@dataclass
class Prepared:
    data: ResponseData
    split: Split
    X: np.ndarray  # (Q, D) frozen encoder embeddings of every question
    encoder_id: str
    encoder_dir: str | None = None  # a fine-tuned encoder's folder (prepare_finetuned)
    finetune: dict | None = None  # how it was fine-tuned

    def pairs(self, part: str) -> Pairs:
        mask = dict(zip(("train", "val", "test"), self.split.masks(self.data)))[part]
        return Pairs.from_numpy(self.data.q_idx[mask], self.data.m_idx[mask], self.data.labels[mask])

    def rows(self, part: str) -> np.ndarray:
        """Question rows of a part that have at least one (non-held-out) response."""
        p = self.pairs(part)
        return np.unique(p.q.numpy())

    @property
    def Xt(self) -> torch.Tensor:
        return torch.as_tensor(self.X)


def prepare(data: ResponseData, encoder: QuestionEncoder, *, seed: int = 0, split: Split | None = None,
            cache_root: str | Path | None = None, progress: bool = True) -> Prepared:
    X = encode_cached(encoder, data.texts, cache_root, progress=progress)
    return Prepared(data, split or split_by_question(data, seed), X, encoder.encoder_id)


def prepare_finetuned(data: ResponseData, base: str, kind: str, settings, *, seed: int = 0,
                      split: Split | None = None, cache_root: str | Path | None, folder: str | Path,
                      fit_fn=None, progress: bool = True) -> Prepared:
    """Fine-tune the top layers of encoder `base` end to end with a `kind` head (JE-IRT or MF,
    the fixed configuration) on the split's training questions, early-stopped on its validation
    questions (model/finetune.py); then embed every question with the fine-tuned encoder."""
    from ..encoders import make_encoder
    from ..model.finetune import finetune_encoder
    from ..model.train import fit
    from .selection import fixed_config
    split = split or split_by_question(data, seed)
    masks = dict(zip(("train", "val"), split.masks(data)[:2]))
    pairs = {k: Pairs.from_numpy(data.q_idx[m], data.m_idx[m], data.labels[m]) for k, m in masks.items()}
    tuned = finetune_encoder(base, [str(t) for t in data.texts], data.n_models, pairs["train"], pairs["val"],
                             fixed_config(kind).model_copy(update={"seed": seed}), settings, folder, cache_root,
                             fit_fn=fit_fn or fit, progress=progress)
    prep = prepare(data, make_encoder(str(tuned.folder)), seed=seed, split=split, cache_root=cache_root,
                   progress=progress)
    prep.encoder_dir, prep.finetune = str(tuned.folder), tuned.report
    return prep


def pair_probs(prob_all: np.ndarray, rows: np.ndarray, pairs: Pairs) -> np.ndarray:
    """Pick each pair's probability out of a (len(rows), n_models) matrix."""
    pos = np.full(int(rows.max()) + 1, -1)
    pos[rows] = np.arange(len(rows))
    return prob_all[pos[pairs.q.numpy()], pairs.m.numpy()]
