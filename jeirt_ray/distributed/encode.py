"""Ray Data encoding: shard the frozen encoder's inference over replicas, merge into the cache.

Texts already in the embedding cache are skipped; the rest flow through a pool of encoder
actors (each loads the encoder once; one GPU each when asked, otherwise a fraction of a CPU so
that Ray Data's read tasks still get a CPU on a small machine), and every finished block is
written to the cache as it arrives, so an interrupted run keeps its work.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..encoders import EmbeddingCache, make_encoder, text_hash


class EncoderActor:
    """One encoder replica (a Ray Data callable class)."""

    def __init__(self, spec: str, threads: int = 1, batch_size: int = 64):
        import torch
        torch.set_num_threads(threads)
        self.encoder = make_encoder(spec)
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = self.encoder.encode([str(t) for t in batch["text"]], batch_size=self.batch_size)
        return {"text_hash": batch["text_hash"], "vector": vectors}


def encode_with_ray(spec: str, texts, cache_root: str | Path, *, replicas: int = 1, gpus_per_replica: float = 0.0,
                    cpus_per_replica: float = 0.5, threads_per_replica: int = 1, batch_size: int = 64,
                    progress: bool = True) -> np.ndarray:
    """Embeddings of `texts` with encoder `spec`, encoding only what the cache lacks, on Ray Data."""
    import ray

    # our own bar is the progress: Ray Data's bars and console lines are off (Ray Data still
    # writes everything to the session's logs/ray-data folder; errors still raise here)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    texts = [str(t) for t in texts]
    hashes = [text_hash(t) for t in texts]
    cache = EmbeddingCache(cache_root, make_encoder(spec).encoder_id)  # the id needs no weights loaded
    todo = cache.missing(hashes)
    if todo:
        by_hash = dict(zip(hashes, texts))
        # length-sorted, so each batch pads to similar lengths (what SentenceTransformer.encode
        # does within one call, and what a per-batch actor cannot do across batches)
        todo = sorted(todo, key=lambda h: len(by_hash[h]))
        ds = ray.data.from_items([{"text_hash": h, "text": by_hash[h]} for h in todo])
        resources = {"num_gpus": gpus_per_replica} if gpus_per_replica else {"num_cpus": cpus_per_replica}
        out = ds.map_batches(EncoderActor, fn_constructor_kwargs={"spec": spec, "batch_size": batch_size,
                                                                       "threads": threads_per_replica},
                             batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=replicas), **resources)
        bar = tqdm(total=len(todo), desc=f"encoding on Ray ({replicas} replicas)", unit="q", disable=not progress)
        for block in out.iter_batches(batch_size=1024, batch_format="numpy"):
            cache.put([str(h) for h in block["text_hash"]], np.stack(block["vector"]))
            bar.update(len(block["text_hash"]))
        bar.close()
    return cache.get(hashes)
