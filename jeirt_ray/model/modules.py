"""The torch modules: JE-IRT and the amortised baselines, all with one calling convention.

`forward(x, q, m)` takes the frozen encoder embeddings `x` of the distinct questions in a batch
(B, D), and for each observed pair the row of its question in `x` (q) and its model index (m);
it returns one logit per pair. The text side runs once per distinct question, never per pair.
`score_all(x)` returns the (B, n_models) logits of every model, used for routing.
"""

from __future__ import annotations

import torch
from torch import nn

DENSE_LIMIT = 1 << 22  # largest (questions x models) logit block computed densely per batch


class Dropout(nn.Dropout):
    """nn.Dropout drawing its mask with `torch.rand` instead of a Bernoulli kernel: the same
    operation (keep with probability 1 - p, scale by 1 / (1 - p)), twice as fast on CPU, where
    the two dropout layers were the largest single cost of a training step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * (torch.rand_like(x) >= self.p) * (1.0 / (1.0 - self.p))


def adapter(in_dim: int, hidden: int, out_dim: int, dropout: float, input_dropout: float = 0.0) -> nn.Sequential:
    """The paper's 2-layer MLP: Linear(D, h) -> ReLU -> Dropout -> Linear(h, d), optionally with
    dropout on the frozen embedding too (a regulariser against memorising training questions)."""
    layers = [Dropout(input_dropout)] if input_dropout > 0 else []
    return nn.Sequential(*layers, nn.Linear(in_dim, hidden), nn.ReLU(), Dropout(dropout),
                         nn.Linear(hidden, out_dim))


class JEIRT(nn.Module):
    """P(correct) = sigmoid(E_Q . E_M / ||E_Q|| - ||E_Q||), E_Q = adapter(x), E_M a free row."""

    kind = "jeirt"

    def __init__(self, in_dim: int, n_models: int, dim: int = 128, hidden: int | None = None,
                 dropout: float = 0.1, input_dropout: float = 0.0, ability_prior: float = 0.0,
                 norm_shrinkage: float = 0.0):
        super().__init__()
        self.adapter = adapter(in_dim, hidden or 2 * in_dim, dim, dropout, input_dropout)
        self.models = nn.Embedding(n_models, dim)
        nn.init.normal_(self.models.weight, std=0.1)
        self.ability_prior, self.norm_shrinkage = ability_prior, norm_shrinkage
        self.penalty = torch.zeros(())  # the last training batch's regulariser, added to its loss

    def question_vectors(self, x: torch.Tensor) -> torch.Tensor:
        return self.adapter(x)

    @staticmethod
    def split(e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Direction (unit vector) and norm (difficulty) of question vectors."""
        norm = e.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return e / norm, norm.squeeze(-1)

    def forward(self, x: torch.Tensor, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        u, norm = self.split(self.question_vectors(x))
        if self.training and (self.ability_prior or self.norm_shrinkage):
            # a Gaussian prior of the LLM vectors around their mean (not around 0, as weight
            # decay), and of the batch's difficulties around theirs
            w = self.models.weight
            self.penalty = self.ability_prior * (w - w.mean(0)).pow(2).sum(1).mean() + \
                self.norm_shrinkage * (norm - norm.mean()).pow(2).mean()
        block = u.shape[0] * self.models.num_embeddings
        if block <= DENSE_LIMIT and 4 * len(q) >= block:
            # a dense batch (most LLMs answered these questions): one small (questions x models)
            # product, then gather, is far cheaper than gathering a d-dimensional vector per pair
            return (u @ self.models.weight.T)[q, m] - norm[q]
        # a sparse batch: one dot product per observed pair, so the cost follows the pairs
        return (u[q] * self.models(m)).sum(-1) - norm[q]

    def score_all(self, x: torch.Tensor) -> torch.Tensor:
        u, norm = self.split(self.question_vectors(x))
        return u @ self.models.weight.T - norm[:, None]


class MatrixFactorization(nn.Module):
    """EmbedLLM's matrix factorisation: model table, linear projection of the frozen question
    embedding, elementwise product, linear head (one logit; EmbedLLM's two-class softmax is the
    same model)."""

    kind = "mf"

    def __init__(self, in_dim: int, n_models: int, dim: int = 128, dropout: float = 0.1):
        super().__init__()
        self.models = nn.Embedding(n_models, dim)
        self.proj = nn.Linear(in_dim, dim)
        self.drop = Dropout(dropout)
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.models(m) * self.proj(x)[q])).squeeze(-1)

    def score_all(self, x: torch.Tensor) -> torch.Tensor:
        qv = self.proj(x)  # (B, d)
        return (qv * self.head.weight[0]) @ self.models.weight.T + self.head.bias


class AmortizedIRT(nn.Module):
    """1PL: sigmoid(theta_m - b(x)); 2PL: sigmoid(a(x) * (theta_m - b(x))), with difficulty b and
    discrimination a predicted from the question text and one scalar ability per LLM."""

    def __init__(self, in_dim: int, n_models: int, two_pl: bool, hidden: int = 256, dropout: float = 0.1):
        super().__init__()
        self.kind = "irt2pl" if two_pl else "irt1pl"
        self.two_pl = two_pl
        self.net = adapter(in_dim, hidden, 2 if two_pl else 1, dropout)
        self.ability = nn.Embedding(n_models, 1)
        nn.init.zeros_(self.ability.weight)

    def _params(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        a = out[:, 1] + 1.0 if self.two_pl else torch.ones_like(out[:, 0])
        return a, out[:, 0]

    def forward(self, x: torch.Tensor, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        a, b = self._params(x)
        return a[q] * (self.ability(m).squeeze(-1) - b[q])

    def score_all(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self._params(x)
        return a[:, None] * (self.ability.weight[:, 0][None, :] - b[:, None])


def build_module(kind: str, in_dim: int, n_models: int, **kw) -> nn.Module:
    if kind == "jeirt":
        return JEIRT(in_dim, n_models, dim=kw.get("dim", 128), hidden=kw.get("hidden"),
                     dropout=kw.get("dropout", 0.1), input_dropout=kw.get("input_dropout", 0.0),
                     ability_prior=kw.get("ability_prior", 0.0), norm_shrinkage=kw.get("norm_shrinkage", 0.0))
    if kind == "mf":
        return MatrixFactorization(in_dim, n_models, dim=kw.get("dim", 128), dropout=kw.get("dropout", 0.1))
    if kind in ("irt1pl", "irt2pl"):
        return AmortizedIRT(in_dim, n_models, two_pl=kind == "irt2pl", hidden=kw.get("hidden") or 256,
                            dropout=kw.get("dropout", 0.1))
    raise ValueError(f"unknown model kind {kind!r}; expected jeirt, mf, irt1pl or irt2pl")
