"""Ray Data encoding on a real local Ray cluster (one per module)."""

import numpy as np
import pytest

from jeirt_ray.encoders import EmbeddingCache, HashingEncoder

import ray


def test_ray_encode_matches_plain_and_caches(ray_cluster, tmp_path):
    from jeirt_ray.distributed.encode import encode_with_ray
    texts = [f"question number {i} about topic {i % 7}" for i in range(300)] + ["question number 0 about topic 0"]
    vecs = encode_with_ray("hashing-64", texts, tmp_path, replicas=2, batch_size=32, progress=False)
    assert vecs.shape == (301, 64)
    assert np.allclose(vecs, HashingEncoder(64).encode(texts))
    assert len(EmbeddingCache(tmp_path, "hashing-64")) == 300  # the duplicate text is encoded once
    # a second run finds everything cached and starts no Ray work
    again = encode_with_ray("hashing-64", texts, tmp_path, replicas=2, progress=False)
    assert np.array_equal(again, vecs)
