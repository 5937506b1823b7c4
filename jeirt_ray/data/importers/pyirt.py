"""py-irt JSONL (`{"subject_id", "responses": {item_id: 0 or 1}}` per line) with texts from a side file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..errors import DataError
from ..tables import read_table
from .collector import LFS_FIX, Collector, is_lfs_pointer, label_value, place_of
from .harness import read_records


def _pyirt_items(files: list[Path], limit: int = 2000) -> list[str]:
    """Up to `limit` item ids, to tell whether they are texts (py-irt's amortized input)."""
    items: list[str] = []
    for path in files:
        for _, rec, _ in read_records(path):
            if rec and isinstance(rec.get("responses"), dict):
                items += [str(i) for i in rec["responses"]]
            if len(items) >= limit:
                return items
    return items


def ids_are_texts(items: list[str]) -> bool:
    """Item ids that read as question texts: most have several words (py-irt's amortized models
    take the item text as its id)."""
    return bool(items) and float(np.mean([len(i.split()) >= 4 for i in items])) > 0.8


def read_pyirt(src: str | Path, texts: str | Path | None, progress: bool = True,
               texts_from_ids: bool | None = None) -> Collector:
    """`texts_from_ids`: the item ids are the question texts (py-irt's amortized input); None:
    decided from the ids when no `texts` file is given."""
    src, col = Path(src), Collector()
    files = [src] if src.is_file() else sorted(src.glob("*.jsonl"))
    if not files:
        raise DataError("no .jsonl file here", file=str(src))
    if texts is None and texts_from_ids is None:
        texts_from_ids = ids_are_texts(_pyirt_items(files))
        if texts_from_ids:
            col.notes.append("the item ids read as question texts (py-irt's amortized input): used as the texts")
    if texts is None and not texts_from_ids:
        raise DataError("py-irt data has no question texts, and JE-IRT embeds each question's text: pass "
                        "--texts FILE (columns question_id, text and optionally benchmark), or --texts-from-ids "
                        "when the item ids are the texts (py-irt's amortized input)", file=str(src))
    known = None
    if texts is not None:
        table = read_table(Path(texts))
        missing = [c for c in ("question_id", "text") if c not in table.columns]
        if missing:
            raise DataError(f"missing column(s) {missing}; found {list(table.columns)}", file=str(texts))
        bench = table["benchmark"] if "benchmark" in table.columns else ["pyirt"] * len(table)
        known = {str(q): (str(t), str(b)) for q, t, b in zip(table["question_id"], table["text"], bench)}
    for path in files:
        col.files += 1
        if is_lfs_pointer(path):
            col.skip(LFS_FIX, file=str(path))
            continue
        for n, rec, why in tqdm(read_records(path), desc=f"importing {path.name}", unit="subject", disable=not progress):
            if rec is None:
                col.skip(why, **place_of(path, n))
                continue
            subject, responses = rec.get("subject_id"), rec.get("responses")
            if subject is None or not isinstance(responses, dict):
                col.skip("a py-irt record needs subject_id and a responses object", **place_of(path, n))
                continue
            for item, value in responses.items():
                if known is not None and str(item) not in known:
                    col.skip("item has no text in the texts file", **place_of(path, n), column="responses",
                             value=item)
                    continue
                try:
                    label = label_value(value, place_of(path, n), f"responses.{item}")
                except DataError as e:
                    col.skipped.append(str(e))
                    continue
                text, benchmark = known[str(item)] if known is not None else (str(item), "pyirt")
                col.add(str(subject), col.question(str(item), benchmark, text), label)
    return col
