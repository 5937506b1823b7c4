"""JE-IRT's items sharpened by a population's answers.

A question's vector E_Q comes from its text through the adapter: amortised, it cannot be more
exact than the text allows. Where thousands of known LLMs have answered a question, its answers
say more: each item's vector is refitted to them, the LLMs' vectors frozen, starting from (and
held near) the adapter's vector, as classical IRT fits each item's parameters. The known LLMs'
answers are all it uses, so a new LLM's answers are never seen. The result is a CoreSpace whose
question inputs are the sharpened vectors themselves (each member's adapter a slice of them), for
the onboarding studies in memory; it is not a servable space."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from ..model.space import CoreSpace


class Slice(nn.Module):
    """A member's question vectors out of the members' vectors side by side."""

    def __init__(self, start: int, stop: int):
        super().__init__()
        self.start, self.stop = start, stop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.start:self.stop]


def sharpen(space: CoreSpace, X: np.ndarray, labels: np.ndarray, steps: int = 300, lr: float = 0.02,
            anchor: float = 1e-3) -> CoreSpace:
    """The space with every question's vector refitted to the known LLMs' answers (`labels`:
    questions x the space's LLMs, NaN unanswered), by full-batch Adam on the binary cross-entropy
    plus `anchor` times the squared distance to the adapter's vector (a question few LLMs
    answered stays near it)."""
    seen = torch.as_tensor(~np.isnan(labels))
    y = torch.as_tensor(np.nan_to_num(labels), dtype=torch.float32)
    vectors, members = [], []
    for i, member in enumerate(space.members):
        start = torch.as_tensor(space.question_vectors(X, member=i), dtype=torch.float32)
        models = torch.as_tensor(space.model_vectors(i), dtype=torch.float32)
        e = start.clone().requires_grad_(True)
        opt = torch.optim.Adam([e], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            norm = e.norm(dim=1, keepdim=True).clamp_min(1e-6)
            logits = (e / norm) @ models.T - norm
            loss = nn.functional.binary_cross_entropy_with_logits(logits[seen], y[seen])
            (loss + anchor * (e - start).pow(2).sum(1).mean()).backward()
            opt.step()
        vectors.append(e.detach().numpy())
        d = start.shape[1]
        sharp = _copy_with_adapter(member, Slice(i * d, (i + 1) * d))
        members.append(sharp)
    joined = np.concatenate(vectors, axis=1).astype(np.float32)
    return dataclasses.replace(space, members=members, in_dim=joined.shape[1], question_embeddings=joined,
                               metadata={**space.metadata, "items": "sharpened by the known LLMs' answers"},
                               routing={}, member_configs=[])


def _copy_with_adapter(member: nn.Module, adapter: nn.Module) -> nn.Module:
    import copy
    out = copy.deepcopy(member)
    out.adapter = adapter
    return out.eval()
