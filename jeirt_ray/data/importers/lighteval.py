"""lighteval details parquet (the Open LLM Leaderboard v1)."""

from __future__ import annotations

import re
from pathlib import Path

from tqdm.auto import tqdm

from ..errors import DataError
from .collector import LFS_FIX, Collector, is_lfs_pointer, label_value, place_of
from .harness import HarnessOptions, read_records

DETAILS_FILE = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.parquet$")


def _lighteval_model(path: Path, src: Path) -> tuple[str, str] | None:
    """(model, where the name came from) of a details file: a `details_<org>__<model>` folder (the
    leaderboard's details sets, as downloaded), else lighteval's own layout
    `details/<model name>/<date>/details_<task>_<date>.parquet`."""
    for folder in [path.parent, *path.parent.parents]:
        if folder.name.startswith("details_") and not DETAILS_FILE.match(folder.name + ".parquet"):
            return folder.name[len("details_"):].replace("__", "/"), f"the details set {folder.name!r}"
        if folder == src.parent:
            break
    parts = path.relative_to(src).parts if path.is_relative_to(src) else path.parts
    if "details" in parts[:-2]:
        start = len(parts) - 1 - parts[::-1].index("details")
        name = "/".join(parts[start + 1:-2])  # between details/ and the <date>/ folder
        if name:
            return name, f"the folder details/{name}"
    return None


def _metrics_dict(value) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):  # lighteval casts nested columns to str when Arrow cannot type them
        import ast
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


LIGHTEVAL_METRICS = ("acc", "acc_norm", "em", "exact_match", "quasi_em", "mc2", "pass@1")


def read_lighteval(src: str | Path, opts: HarnessOptions | None = None, progress: bool = True,
                   col: Collector | None = None) -> Collector:
    """lighteval's details: one Parquet file a task and run (`details_<task>_<date>.parquet`, task
    as `suite|name|fewshot`), a record per example with `example` (the query without few-shot
    examples), `full_prompt` and `metrics` ({name: value}). Into `col` when given."""
    import hashlib
    src, opts, col = Path(src), opts or HarnessOptions(), col or Collector()
    files = sorted((p for p in src.rglob("details_*.parquet") if DETAILS_FILE.match(p.name)),
                   key=lambda p: (DETAILS_FILE.match(p.name)["date"], str(p)))
    if not files:
        raise DataError("no lighteval details files (details_<task>_<date>.parquet) under this folder", file=str(src))
    for path in tqdm(files, desc="importing lighteval details", unit="file", disable=not progress):
        col.files += 1
        if is_lfs_pointer(path):
            col.skip(LFS_FIX, file=str(path))
            continue
        owner = _lighteval_model(path, src)
        if owner is None:
            col.skip("which model ran it is unknown: it is neither in a details_<org>__<model> folder nor in "
                     "lighteval's details/<model>/<date>/ layout", file=str(path))
            continue
        model, source = owner
        col.name_sources.setdefault(model, source)
        task = DETAILS_FILE.match(path.name)["task"]
        benchmark = task.split("|")[1] if task.count("|") >= 2 else task
        try:
            records = list(read_records(path))
        except (OSError, ValueError) as e:
            col.skip(f"unreadable ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(path))
            continue
        for n, rec, _ in records:
            metrics = _metrics_dict(rec.get("metrics"))
            chosen = opts.metrics.get(task) or opts.metrics.get(benchmark) or \
                next((m for m in LIGHTEVAL_METRICS if metrics and m in metrics), None)
            if not metrics or chosen not in metrics:
                col.skip(f"no label metric (tried {chosen or list(LIGHTEVAL_METRICS)}; choose one with --metric "
                         f"{benchmark}=NAME)", **place_of(path, n), column="metrics",
                         value=sorted(metrics)[:8] if metrics else rec.get("metrics"))
                continue
            try:
                label = label_value(metrics[chosen], place_of(path, n), f"metrics.{chosen}")
            except DataError as e:
                col.skipped.append(str(e))
                continue
            text = str(rec.get("example") or "").strip() or str(rec.get("full_prompt") or "").split("\n\n")[-1].strip()
            if not text:
                col.skip("no question text", **place_of(path, n), column="example")
                continue
            hashes = rec.get("hashes") if isinstance(rec.get("hashes"), dict) else {}
            ident = hashes.get("example") or hashlib.sha256(text.encode()).hexdigest()[:16]
            col.add(model, col.question(f"{benchmark}/{ident}", benchmark, text), label)
    return col
