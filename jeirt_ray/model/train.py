"""The fast single-process trainer, shared unchanged by the Ray Train wrapper.

Each step takes a batch of distinct questions, runs the text side once on them and scores all
of their observed (model, question) pairs, gathered from a question-sorted index (no Python loop
over pairs, no dense matrix). Early stopping on validation loss keeps the best weights.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from .modules import build_module
from .token_states import TokenStates


class TrainConfig(BaseModel):
    kind: str = "jeirt"
    dim: int = Field(128, ge=1)
    hidden: int | None = Field(None, ge=1, description="adapter width; default 2 x encoder dim")
    dropout: float = Field(0.1, ge=0, lt=1)
    input_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the frozen embedding (JE-IRT)")
    ability_prior: float = Field(0.0, ge=0, description="JE-IRT: penalty on the LLM vectors' spread around their mean")
    norm_shrinkage: float = Field(0.0, ge=0, description="JE-IRT: penalty on the difficulties' spread in a batch")
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    question_batch: int = Field(256, ge=1, description="distinct questions per step")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="learning rate: constant, or cosine decay to 0 over max_epochs")
    max_epochs: int = Field(200, ge=1)
    patience: int = Field(10, ge=1, description="epochs without a better validation loss before stopping")
    seed: int = 0


def _as_tensor(a, dtype: torch.dtype) -> torch.Tensor:
    """A tensor sharing `a`'s memory when the dtype matches. Arrays from Ray's object store are
    read-only: torch warns because writing to them would be undefined, but the trainer only
    reads these tensors, and copying them would cost every Ray worker the dataset's size again."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(a if isinstance(a, torch.Tensor) else np.asarray(a), dtype=dtype)


@dataclass
class Pairs:
    """Observed (question, model, label) triples as tensors."""

    q: torch.Tensor
    m: torch.Tensor
    y: torch.Tensor

    @classmethod
    def from_numpy(cls, q, m, y) -> "Pairs":
        return cls(_as_tensor(q, torch.long), _as_tensor(m, torch.long), _as_tensor(y, torch.float32))

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
    notes: dict = field(default_factory=dict)  # where it ran, e.g. Ray Train's resume point


class QuestionBatcher:
    """Groups pairs by question so a batch of questions brings all of its pairs along."""

    def __init__(self, pairs: Pairs):
        # the question-sorted order of the pairs, not sorted copies of them: one index array
        # instead of three at tens of millions of pairs
        self.pairs = pairs
        self.order = torch.argsort(pairs.q, stable=True)
        self.questions, counts = torch.unique_consecutive(pairs.q[self.order], return_counts=True)
        self.counts = counts
        self.starts = torch.cumsum(counts, 0) - counts

    def batches(self, batch_size: int, generator: torch.Generator, rank: int = 0, world: int = 1):
        """Shuffled batches of `batch_size` questions with all of their pairs.

        With `world` > 1 (data-parallel workers drawing the same permutation), each global batch of
        `batch_size * world` questions is dealt out so that worker `rank` gets a disjoint share,
        and every worker takes the same number of steps (DDP needs that). The few questions
        beyond a multiple of `world` sit out that epoch; the permutation changes every epoch.
        """
        perm = torch.randperm(len(self.questions), generator=generator)
        perm = perm[:len(perm) - len(perm) % world] if world > 1 else perm
        step = batch_size * world
        for i in range(0, len(perm), step):
            sel = perm[i:i + step][rank::world]
            counts = self.counts[sel]
            # pair positions of the selected questions, without a loop: start of each run + offset
            offsets = torch.repeat_interleave(self.starts[sel] - (torch.cumsum(counts, 0) - counts), counts)
            pos = self.order[offsets + torch.arange(int(counts.sum()))]
            local = torch.repeat_interleave(torch.arange(len(sel)), counts)
            yield self.questions[sel], local, self.pairs.m[pos], self.pairs.y[pos]


@torch.no_grad()
def pair_logits(module: torch.nn.Module, X: torch.Tensor, pairs: Pairs, chunk: int = 8192) -> torch.Tensor:
    """Logits of the given pairs, running the text side once per distinct question."""
    module.eval()
    dev = X.states.device if isinstance(X, TokenStates) else X.device
    chunk = min(chunk, getattr(X, "eval_chunk", chunk))
    uq, local = torch.unique(pairs.q, return_inverse=True)
    out = torch.empty(len(pairs), device=dev)
    # batch by questions to bound memory
    for i in range(0, len(uq), chunk):
        sel = (local >= i) & (local < i + chunk)
        out[sel.to(dev)] = module(X[uq[i:i + chunk].to(dev)], (local[sel] - i).to(dev), pairs.m[sel].to(dev))
    return out


@dataclass
class TrainState:
    """Everything needed to continue a run after `epoch` (a checkpoint): current and best
    weights, optimizer moments, the shuffling generator and the history so far."""

    epoch: int
    model: dict[str, torch.Tensor]
    optimizer: dict
    best_model: dict[str, torch.Tensor]
    best_val_loss: float
    best_epoch: int
    seconds_to_best: float
    generator: torch.Tensor  # the batch shuffler's state
    rng: torch.Tensor  # torch's global RNG (dropout masks)
    history: list[dict]

    def to_flat(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(tensors, JSON-able metadata): the safetensors form of the state, no pickle."""
        tensors = {f"model.{k}": v for k, v in self.model.items()}
        tensors |= {f"best.{k}": v for k, v in self.best_model.items()}
        tensors |= {f"opt.{i}.{k}": torch.as_tensor(v) for i, st in self.optimizer["state"].items()
                    for k, v in st.items()}
        tensors["generator"], tensors["rng"] = self.generator, self.rng
        meta = {"epoch": self.epoch, "best_val_loss": self.best_val_loss, "best_epoch": self.best_epoch,
                "seconds_to_best": self.seconds_to_best, "history": self.history,
                "param_groups": self.optimizer["param_groups"]}
        # copies: the live run keeps changing its weights and history after this snapshot
        return {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, copy.deepcopy(meta)

    @classmethod
    def from_flat(cls, tensors: dict[str, torch.Tensor], meta: dict) -> "TrainState":
        def part(prefix):
            return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        opt_state: dict[int, dict] = {}
        for key, v in part("opt.").items():
            i, name = key.split(".", 1)
            opt_state.setdefault(int(i), {})[name] = v
        return cls(meta["epoch"], part("model."), {"state": opt_state, "param_groups": meta["param_groups"]},
                   part("best."), meta["best_val_loss"], meta["best_epoch"], meta["seconds_to_best"],
                   tensors["generator"], tensors["rng"], meta["history"])


def fit(X: np.ndarray | torch.Tensor, n_models: int, train: Pairs, val: Pairs, config: TrainConfig,
        *, module: torch.nn.Module | None = None, progress: bool = True,
        on_epoch: Callable[[dict, Callable[[], TrainState], bool], None] | None = None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        resume: TrainState | None = None, rank: int = 0, world: int = 1,
        device: str | torch.device = "cpu") -> FitResult:
    """Train with AdamW and early stopping on validation loss; return the best weights.

    `X` holds the frozen encoder embedding of every question (indexed by the pairs' q), or their
    token hidden states (TokenStates) for a module that fine-tunes the encoder's top
    (finetune.FineTuned, whose `param_groups` give the encoder its own learning rate). For data
    parallel training, `wrap` wraps the module (DDP) and `rank`/`world` give this worker its
    share of every batch (see QuestionBatcher); every worker computes the same validation loss,
    so all of them stop at the same epoch. `on_epoch(row, snapshot)` receives each epoch's
    metrics, a function returning the TrainState (to checkpoint) and whether this is the last
    epoch; `resume` continues from a TrainState.
    """
    torch.manual_seed(config.seed)
    device = torch.device(device)
    X = X.to(device) if isinstance(X, TokenStates) else _as_tensor(X, torch.float32).to(device)
    if module is None:
        module = build_module(config.kind, X.shape[1], n_models, **config.model_dump(exclude={"kind"}))
    module.to(device)
    gen = torch.Generator().manual_seed(config.seed)
    params = module.param_groups(config.lr) if hasattr(module, "param_groups") else module.parameters()
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    for group in opt.param_groups:
        group["initial_lr"] = group["lr"]  # each group's own peak, for the cosine schedule
    if resume is not None:
        module.load_state_dict(resume.model)
        opt.load_state_dict(resume.optimizer)
        gen.set_state(resume.generator)
        torch.set_rng_state(resume.rng)
        best = (resume.best_val_loss, resume.best_epoch, resume.best_model, resume.seconds_to_best)
        history, first = list(resume.history), resume.epoch + 1
    else:
        best, history, first = (float("inf"), -1, None, 0.0), [], 0
    net = wrap(module) if wrap else module
    batcher = QuestionBatcher(train)
    val_y = val.y.to(device)
    offset = history[-1]["seconds"] if history else 0.0
    start = time.perf_counter()

    def snapshot(epoch: int) -> Callable[[], TrainState]:
        return lambda: TrainState(epoch, module.state_dict(), opt.state_dict(), best[2], best[0], best[1], best[3],
                                  gen.get_state(), torch.get_rng_state(), history)

    # a bar in a terminal only: redrawn every epoch, it would fill a log file
    bar = tqdm(range(first, config.max_epochs), desc=f"training {config.kind}", disable=None if progress else True,
               leave=False)
    for epoch in bar:
        if epoch - best[1] > config.patience:
            break  # a resumed run that had already run out of patience
        if config.schedule == "cosine":  # per epoch, so a resumed run needs no scheduler state
            for group in opt.param_groups:
                group["lr"] = 0.5 * group["initial_lr"] * (1 + math.cos(math.pi * epoch / config.max_epochs))
        net.train()
        total, n = 0.0, 0
        for qb, local, m, y in batcher.batches(config.question_batch, gen, rank, world):
            y = y.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):  # bf16 on GPUs
                logits = net(X[qb.to(device)], local.to(device), m.to(device))
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
            if getattr(module, "ability_prior", 0) or getattr(module, "norm_shrinkage", 0):
                loss = loss + module.penalty
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            n += len(y)
        val_loss = float(F.binary_cross_entropy_with_logits(pair_logits(module, X, val), val_y))
        if not np.isfinite(val_loss):
            raise FloatingPointError(f"training {config.kind} diverged at epoch {epoch} (validation loss "
                                     f"{val_loss}); lower the learning rate (now {config.lr})")
        row = {"epoch": epoch, "train_loss": total / max(n, 1), "val_loss": val_loss,
               "seconds": offset + time.perf_counter() - start}
        history.append(row)
        if val_loss < best[0] - 1e-5:
            best = (val_loss, epoch, copy.deepcopy(module.state_dict()), row["seconds"])
        last = epoch - best[1] >= config.patience or epoch == config.max_epochs - 1
        if on_epoch:
            on_epoch(row, snapshot(epoch), last)
        bar.set_postfix(val_loss=f"{val_loss:.4f}", best=f"{best[0]:.4f}")
        if last:
            break
    bar.close()
    module.load_state_dict(best[2])
    module.eval()
    return FitResult(module, best[0], best[1], len(history), offset + time.perf_counter() - start, best[3], history)
