import numpy as np
import pytest

from jeirt_ray.encoders import EmbeddingCache, HashingEncoder, encode_cached, make_encoder, text_hash


class CountingEncoder(HashingEncoder):
    def __init__(self):
        super().__init__(32)
        self.calls = 0

    def encode(self, texts, batch_size=64):
        self.calls += len(texts)
        return super().encode(texts, batch_size)


def test_hashing_deterministic():
    enc = HashingEncoder(64)
    a = enc.encode(["What is two plus two?", "Capital of France"])
    assert a.shape == (2, 64) and a.dtype == np.float32
    assert np.array_equal(a, HashingEncoder(64).encode(["What is two plus two?", "Capital of France"]))
    assert np.allclose(np.linalg.norm(a, axis=1), 1)


def test_cache_second_run_encodes_nothing(tmp_path):
    texts = ["a b c", "d e f", "a b c", "g h"]
    enc = CountingEncoder()
    first = encode_cached(enc, texts, tmp_path, chunk=2, progress=False)
    assert enc.calls == 3  # duplicates encoded once
    again = encode_cached(enc, texts, tmp_path, progress=False)
    assert enc.calls == 3 and np.array_equal(first, again)
    # a fresh cache object reads the shards from disk
    assert len(EmbeddingCache(tmp_path, enc.encoder_id)) == 3
    assert np.array_equal(EmbeddingCache(tmp_path, enc.encoder_id).get([text_hash("g h")])[0], first[3])


@pytest.mark.parametrize("damage", ["truncate", "garbage", "nan"])
def test_a_damaged_cache_shard_is_set_aside_and_only_its_texts_reencoded(tmp_path, damage, caplog):
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = [f"question {i}" for i in range(6)]
    enc = CountingEncoder()
    first = encode_cached(enc, texts, tmp_path, chunk=2, progress=False)  # three shards of two texts
    shards = sorted((tmp_path / enc.encoder_id).glob("*.parquet"))
    assert len(shards) == 3
    bad = shards[1]
    lost = set(pq.read_table(bad).column("text_hash").to_pylist())
    if damage == "truncate":
        bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    elif damage == "garbage":
        bad.write_bytes(b"not parquet at all")
    else:  # readable, but the values cannot be embeddings
        t = pq.read_table(bad)
        vec = pa.FixedSizeListArray.from_arrays(pa.array([float("nan")] * (t.num_rows * 32), pa.float32()), 32)
        pq.write_table(pa.table({"text_hash": t.column("text_hash"), "vector": vec}), bad)
    enc.calls = 0
    again = encode_cached(enc, texts, tmp_path, progress=False)
    assert enc.calls == len(lost) == 2  # only the damaged shard's texts are encoded again
    assert np.array_equal(first, again)
    assert bad.with_suffix(".corrupt").exists() and "set aside" in caplog.text
    assert all(s.exists() for s in (shards[0], shards[2]))


def test_cache_keyed_by_encoder(tmp_path):
    encode_cached(HashingEncoder(16), ["x"], tmp_path, progress=False)
    encode_cached(HashingEncoder(32), ["x"], tmp_path, progress=False)
    assert len(EmbeddingCache(tmp_path, "hashing-16")) == 1 and len(EmbeddingCache(tmp_path, "hashing-32")) == 1


def test_make_encoder_specs():
    assert make_encoder("hashing").dim == 384 and make_encoder("hashing-64").dim == 64


@pytest.mark.encoder
def test_bundled_minilm_offline():
    enc = make_encoder()
    assert enc.encoder_id == "st:sentence-transformers/all-MiniLM-L6-v2"
    v = enc.encode(["What is the capital of France?", "Paris is the capital of France.", "Solve 2x + 3 = 7."])
    assert v.shape == (3, 384)
    sims = v @ v.T
    assert sims[0, 1] > sims[0, 2]  # a real encoder: the related sentences are closer


@pytest.mark.encoder
def test_minilm_under_onnx_runtime_agrees_with_pytorch_and_is_exported_once(tmp_path, monkeypatch):
    """+onnx gives PyTorch's vectors, +onnx-int8 nearly (cosine >= 0.95, checked when loaded); the
    exported files live in the cache and a second load reads them, not the exporter."""
    from jeirt_ray.encoders.onnx import OnnxSentenceModel
    from jeirt_ray.encoders.sentence import EncoderError
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    texts = ["What is the capital of France?", "Solve 2x + 3 = 7 for x, showing each step.", "Is a contract void?"]
    ref = make_encoder().encode(texts)
    for spec, tol in (("all-MiniLM-L6-v2+onnx", 1e-4), ("all-MiniLM-L6-v2+onnx-int8", 0.05)):
        enc = make_encoder(spec)
        assert enc.encoder_id.endswith(spec.split("+")[1])
        got = enc.encode(texts, batch_size=2)
        assert got.shape == ref.shape and np.min(np.sum(got * ref, 1)) > 1 - tol, spec
    files = sorted((tmp_path / "cache" / "onnx").rglob("*.onnx"))
    assert [f.name for f in files] == ["onnx-int8.onnx", "onnx.onnx"]
    stamps = [f.stat().st_mtime_ns for f in files]
    assert np.allclose(make_encoder("all-MiniLM-L6-v2+onnx-int8").encode(texts[:1]), enc.encode(texts[:1]))
    assert [f.stat().st_mtime_ns for f in files] == stamps

    class Transformer: ...

    class Dense: ...
    with pytest.raises(EncoderError, match=r"exports Transformer \+ Pooling .* Transformer \+ Dense .* drop the \+onnx"):
        OnnxSentenceModel([Transformer(), Dense()], "onnx", "x", EncoderError)
