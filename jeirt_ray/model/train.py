"""The fast single-process trainer, shared unchanged by the Ray Train wrapper.

Each step takes a batch of distinct questions, runs the text side once on them and scores all
of their observed (model, question) pairs, gathered from a question-sorted index (no Python loop
over pairs, no dense matrix). Early stopping on validation loss keeps the best weights.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from .modules import build_module


class TrainConfig(BaseModel):
    kind: str = "jeirt"
    dim: int = Field(128, ge=1)
    hidden: int | None = Field(None, ge=1, description="adapter width; default 2 x encoder dim")
    dropout: float = Field(0.1, ge=0, lt=1)
    input_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the frozen embedding (JE-IRT)")
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    question_batch: int = Field(256, ge=1, description="distinct questions per step")
    max_epochs: int = Field(200, ge=1)
    patience: int = Field(10, ge=1, description="epochs without a better validation loss before stopping")
    seed: int = 0


@dataclass
class Pairs:
    """Observed (question, model, label) triples as tensors."""

    q: torch.Tensor
    m: torch.Tensor
    y: torch.Tensor

    @classmethod
    def from_numpy(cls, q, m, y) -> "Pairs":
        return cls(torch.as_tensor(np.asarray(q), dtype=torch.long), torch.as_tensor(np.asarray(m), dtype=torch.long),
                   torch.as_tensor(np.asarray(y), dtype=torch.float32))

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class FitResult:
    module: torch.nn.Module
    best_val_loss: float
    best_epoch: int
    epochs: int
    seconds: float
    seconds_to_best: float
    history: list[dict] = field(default_factory=list)


class QuestionBatcher:
    """Groups pairs by question so a batch of questions brings all of its pairs along."""

    def __init__(self, pairs: Pairs):
        order = torch.argsort(pairs.q, stable=True)
        self.q, self.m, self.y = pairs.q[order], pairs.m[order], pairs.y[order]
        self.questions, counts = torch.unique_consecutive(self.q, return_counts=True)
        self.counts = counts
        self.starts = torch.cumsum(counts, 0) - counts

    def batches(self, batch_size: int, generator: torch.Generator):
        perm = torch.randperm(len(self.questions), generator=generator)
        for i in range(0, len(perm), batch_size):
            sel = perm[i:i + batch_size]
            counts = self.counts[sel]
            # pair positions of the selected questions, without a loop: start of each run + offset
            offsets = torch.repeat_interleave(self.starts[sel] - (torch.cumsum(counts, 0) - counts), counts)
            idx = offsets + torch.arange(int(counts.sum()))
            local = torch.repeat_interleave(torch.arange(len(sel)), counts)
            yield self.questions[sel], local, self.m[idx], self.y[idx]


@torch.no_grad()
def pair_logits(module: torch.nn.Module, X: torch.Tensor, pairs: Pairs, chunk: int = 8192) -> torch.Tensor:
    """Logits of the given pairs, running the text side once per distinct question."""
    module.eval()
    uq, local = torch.unique(pairs.q, return_inverse=True)
    out = torch.empty(len(pairs))
    # batch by questions to bound memory
    for i in range(0, len(uq), chunk):
        sel = (local >= i) & (local < i + chunk)
        out[sel] = module(X[uq[i:i + chunk]], local[sel] - i, pairs.m[sel])
    return out


def fit(X: np.ndarray | torch.Tensor, n_models: int, train: Pairs, val: Pairs, config: TrainConfig,
        *, module: torch.nn.Module | None = None, progress: bool = True,
        on_epoch: Callable[[dict, torch.nn.Module], None] | None = None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> FitResult:
    """Train with AdamW and early stopping on validation loss; return the best weights.

    `X` holds the frozen encoder embedding of every question (indexed by the pairs' q). `wrap`
    lets a distributed caller wrap the module (DDP); `on_epoch` receives each epoch's metrics.
    """
    torch.manual_seed(config.seed)
    X = torch.as_tensor(X, dtype=torch.float32)
    if module is None:
        module = build_module(config.kind, X.shape[1], n_models, **config.model_dump(exclude={"kind"}))
    net = wrap(module) if wrap else module
    opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    batcher = QuestionBatcher(train)
    gen = torch.Generator().manual_seed(config.seed)
    best = (float("inf"), -1, None, 0.0)
    history: list[dict] = []
    start = time.perf_counter()
    bar = tqdm(range(config.max_epochs), desc=f"training {config.kind}", disable=not progress, leave=False)
    for epoch in bar:
        net.train()
        total, n = 0.0, 0
        for qb, local, m, y in batcher.batches(config.question_batch, gen):
            loss = F.binary_cross_entropy_with_logits(net(X[qb], local, m), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            n += len(y)
        val_loss = float(F.binary_cross_entropy_with_logits(pair_logits(module, X, val), val.y))
        if not np.isfinite(val_loss):
            raise FloatingPointError(f"training {config.kind} diverged at epoch {epoch} (validation loss "
                                     f"{val_loss}); lower the learning rate (now {config.lr})")
        row = {"epoch": epoch, "train_loss": total / max(n, 1), "val_loss": val_loss,
               "seconds": time.perf_counter() - start}
        history.append(row)
        if on_epoch:
            on_epoch(row, module)
        if val_loss < best[0] - 1e-5:
            best = (val_loss, epoch, copy.deepcopy(module.state_dict()), row["seconds"])
        bar.set_postfix(val_loss=f"{val_loss:.4f}", best=f"{best[0]:.4f}")
        if epoch - best[1] >= config.patience:
            break
    bar.close()
    module.load_state_dict(best[2])
    module.eval()
    return FitResult(module, best[0], best[1], len(history), time.perf_counter() - start, best[3], history)
