"""On-disk embedding cache keyed by (encoder id, sha256 of the text), as Parquet shards.

Each encode appends shards as it goes, so an interrupted run keeps what it finished and a
second run encodes nothing. A shard that cannot be read (truncated, corrupted, wrong shape or
non-finite values) is set aside as `<name>.corrupt` with a warning; its texts are simply missing
and encoded again, and every other shard is kept.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from .base import QuestionEncoder

log = logging.getLogger(__name__)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    def __init__(self, root: str | Path, encoder_id: str):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder_id)
        self.directory = Path(root) / safe
        self.encoder_id = encoder_id
        self._table: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._table is None:
            self._table, dim = {}, None
            for shard in sorted(self.directory.glob("*.parquet")):
                try:
                    hashes, vecs = self._read(shard, dim)
                except Exception as e:  # whatever pyarrow or the checks raise: the shard is unusable
                    aside = shard.with_suffix(".corrupt")
                    shard.rename(aside)
                    log.warning("embedding cache: %s is unreadable (%s); set aside as %s, its texts will be "
                                "encoded again", shard, str(e).splitlines()[0][:200], aside.name)
                    continue
                dim = vecs.shape[1]
                self._table.update(zip(hashes, vecs))
        return self._table

    @staticmethod
    def _read(shard: Path, dim: int | None) -> tuple[list[str], np.ndarray]:
        t = pq.read_table(shard)
        vecs = np.asarray(t.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(t.num_rows, -1)
        hashes = t.column("text_hash").to_pylist()
        if dim is not None and vecs.shape[1] != dim:
            raise ValueError(f"vectors of {vecs.shape[1]} dimensions where the other shards have {dim}")
        if not np.isfinite(vecs).all():
            raise ValueError("non-finite values")
        if not all(isinstance(h, str) and len(h) == 64 for h in hashes):
            raise ValueError("a text_hash that is not a sha256")
        return hashes, vecs

    def __len__(self) -> int:
        return len(self._load())

    def missing(self, hashes: list[str]) -> list[str]:
        table = self._load()
        return [h for h in dict.fromkeys(hashes) if h not in table]

    def get(self, hashes: list[str]) -> np.ndarray:
        table = self._load()
        return np.stack([table[h] for h in hashes])

    def put(self, hashes: list[str], vectors: np.ndarray) -> None:
        if not hashes:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        vectors = np.asarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        t = pa.table({"text_hash": hashes,
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)})
        tmp = self.directory / f".{uuid.uuid4().hex}.tmp"
        pq.write_table(t, tmp)
        tmp.rename(self.directory / f"{uuid.uuid4().hex}.parquet")  # atomic: readers never see half a shard
        self._load().update(zip(hashes, vectors))


def fill_cache(cache, texts: list[str], compute, desc: str, chunk: int, progress: bool) -> list:
    """Every text's cached entry, computing `compute(texts)` first for those `cache` lacks, in
    chunks saved as they finish (an interrupted run keeps them). `cache` has missing/put/get by
    text hash: EmbeddingCache, or encoders.hidden.HiddenStateCache."""
    texts = [str(t) for t in texts]
    hashes = [text_hash(t) for t in texts]
    todo = cache.missing(hashes)
    if todo:
        by_hash = dict(zip(hashes, texts))
        bar = tqdm(total=len(todo), desc=desc, unit="q", disable=not progress)
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            cache.put(part, compute([by_hash[h] for h in part]))
            bar.update(len(part))
        bar.close()
    return cache.get(hashes)


def encode_cached(encoder: QuestionEncoder, texts: list[str] | np.ndarray, cache_root: str | Path | None,
                  batch_size: int = 64, chunk: int = 1024, progress: bool = True) -> np.ndarray:
    """Embeddings for texts, encoding only those not cached yet (in chunks saved as they finish)."""
    if cache_root is None:
        return encoder.encode([str(t) for t in texts], batch_size=batch_size)
    return fill_cache(EmbeddingCache(cache_root, encoder.encoder_id), texts,
                      lambda part: encoder.encode(part, batch_size=batch_size),
                      f"encoding ({encoder.encoder_id})", chunk, progress)
