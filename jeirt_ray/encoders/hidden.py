"""The frozen bottom of a sentence-transformers encoder, run once per question and cached.

Fine-tuning the top K of L transformer layers needs, for every question, the token hidden
states that enter layer L-K. They never change during training, so they are computed once (the
encoder truncated to its first L-K layers) and kept on disk, keyed by (encoder id, layer, sha256
of the text) like the embedding cache: safetensors shards of packed half-precision token rows,
written as each chunk finishes, so an interrupted run keeps its work.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from .cache import fill_cache

log = logging.getLogger(__name__)


def layer_count(st_model) -> int:
    return len(st_model[0].auto_model.encoder.layer)


@contextlib.contextmanager
def truncated(st_model, layers: int):
    """The encoder with only its first `layers` transformer layers, for the duration."""
    encoder = st_model[0].auto_model.encoder
    full = encoder.layer
    encoder.layer = full[:layers]
    try:
        yield st_model
    finally:
        encoder.layer = full


@torch.no_grad()
def bottom_states(st_model, texts: list[str], layer: int, batch_size: int = 32) -> list[np.ndarray]:
    """For each text, the (tokens, H) hidden states that enter transformer layer `layer`
    (0: the embedding layer's output), float16, without padding."""
    st_model.eval()
    auto = st_model[0].auto_model
    order = np.argsort([len(t) for t in texts])  # similar lengths per batch: less padding
    out: list[np.ndarray | None] = [None] * len(texts)
    with truncated(st_model, layer):
        for i in range(0, len(texts), batch_size):
            idx = order[i:i + batch_size]
            features = st_model.preprocess([texts[j] for j in idx])
            inputs = {k: v.to(auto.device) for k, v in features.items()
                      if k in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = auto(**inputs).last_hidden_state.float().cpu().numpy()
            lengths = inputs["attention_mask"].sum(1).cpu().numpy()
            for row, j in enumerate(idx):
                out[j] = hidden[row, :lengths[row]].astype(np.float16)
    return out


class HiddenStateCache:
    def __init__(self, root: str | Path, encoder_id: str, layer: int):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder_id)
        self.directory = Path(root) / safe / f"hidden-layer{layer}"
        self._table: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._table is None:
            self._table = {}
            for shard in sorted(self.directory.glob("*.safetensors")):
                try:
                    arrays = load_file(str(shard))
                    hashes = (shard.with_suffix(".hashes").read_text().split())
                    states, lengths = arrays["states"], arrays["lengths"]
                    if len(hashes) != len(lengths) or int(lengths.sum()) != len(states):
                        raise ValueError("hashes, lengths and token rows disagree")
                except Exception as e:  # unreadable: set aside, its texts are computed again
                    shard.rename(shard.with_suffix(".corrupt"))
                    log.warning("hidden-state cache: %s is unreadable (%s); set aside", shard,
                                str(e).splitlines()[0][:200])
                    continue
                self._table.update(zip(hashes, np.split(states, np.cumsum(lengths)[:-1])))
        return self._table

    def missing(self, hashes: list[str]) -> list[str]:
        table = self._load()
        return [h for h in dict.fromkeys(hashes) if h not in table]

    def get(self, hashes: list[str]) -> list[np.ndarray]:
        table = self._load()
        return [table[h] for h in hashes]

    def put(self, hashes: list[str], states: list[np.ndarray]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        # the hash list first: a shard is only read once its safetensors file exists
        (self.directory / f"{name}.hashes").write_text("\n".join(hashes))
        tmp = self.directory / f".{name}.tmp"
        save_file({"states": np.concatenate(states), "lengths": np.array([len(s) for s in states])}, str(tmp))
        tmp.rename(self.directory / f"{name}.safetensors")
        self._load().update(zip(hashes, states))


def cached_bottom_states(st_model, encoder_id: str, texts: list[str], layer: int, cache_root: str | Path,
                         chunk: int = 512, progress: bool = True) -> list[np.ndarray]:
    """bottom_states of every text, computing only those not cached yet."""
    return fill_cache(HiddenStateCache(cache_root, encoder_id, layer), texts,
                      lambda part: bottom_states(st_model, part, layer), f"hidden states below layer {layer}",
                      chunk, progress)
