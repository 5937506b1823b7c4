"""Token hidden states of many questions, packed: the input of the encoder's trainable top.

Fine-tuning runs only the top K transformer layers each step; what the frozen layers below
produce is computed once (encoders/hidden.py) and held here as one (total tokens, H) half
precision array with per-question offsets, instead of a padded (questions, longest, H) block.
Indexing by question rows gives a padded batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class TokenBatch(NamedTuple):
    hidden: torch.Tensor  # (B, T, H) float32, zero beyond each question's length
    mask: torch.Tensor  # (B, T) 1 for a token, 0 for padding


class TokenStates:
    # questions per forward when scoring without gradients (the (B, T, T) attention of a few
    # thousand questions at once would not fit in memory)
    eval_chunk = 64

    def __init__(self, states: np.ndarray | torch.Tensor, lengths: np.ndarray | torch.Tensor):
        self.states = torch.as_tensor(np.asarray(states) if not isinstance(states, torch.Tensor) else states)
        self.lengths = torch.as_tensor(np.asarray(lengths), dtype=torch.long)
        self.offsets = torch.cumsum(self.lengths, 0) - self.lengths
        if int(self.lengths.sum()) != len(self.states):
            raise ValueError(f"{len(self.states)} token rows but the lengths add up to {int(self.lengths.sum())}")

    @classmethod
    def from_list(cls, per_question: list[np.ndarray]) -> "TokenStates":
        return cls(np.concatenate(per_question).astype(np.float16), np.array([len(a) for a in per_question]))

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), self.states.shape[1]

    def to(self, device) -> "TokenStates":
        if self.states.device == torch.device(device):
            return self
        return TokenStates(self.states.to(device), self.lengths.to(device))

    def __getitem__(self, rows) -> TokenBatch:
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.lengths.device)
        lengths = self.lengths[rows]
        steps = torch.arange(int(lengths.max()), device=lengths.device)
        mask = steps[None, :] < lengths[:, None]
        pos = torch.where(mask, self.offsets[rows][:, None] + steps[None, :], 0)
        hidden = self.states[pos].float() * mask[..., None]
        return TokenBatch(hidden, mask.long())
