"""Model names: a user's mapping to canonical names, near-duplicate names, the duplicate rule."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from ..errors import DataError
from ..tables import read_table


def read_mapping(path: str | Path) -> dict[str, str]:
    """A model-name mapping: YAML/JSON `{name: canonical}`, or CSV/Parquet with columns name, canonical."""
    import yaml

    p = Path(path)
    if p.suffix in (".yaml", ".yml", ".json"):
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise DataError("expected a mapping of model name to canonical name", file=str(p))
        return raw
    table = read_table(p)
    missing = [c for c in ("name", "canonical") if c not in table.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; found {list(table.columns)}", file=str(p))
    return dict(zip(table["name"].astype(str), table["canonical"].astype(str)))


def near_duplicate_names(names: Iterable[str]) -> list[list[str]]:
    """Groups of model names that are probably one LLM: equal once the organisation prefix, case
    and punctuation are dropped (`meta-llama/Llama-3-8B` and `llama_3_8b`)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for n in names:
        groups[re.sub(r"[^a-z0-9]", "", n.rsplit("/", 1)[-1].lower())].append(n)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


DUPLICATE_RULE = ("the same model and question read twice (a re-run) keeps the label of the later run, by the "
                  "run's datetime, else the file read later; different models are never merged unless a name "
                  "mapping says so")
