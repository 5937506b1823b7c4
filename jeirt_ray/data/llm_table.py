"""A results folder's own table of its LLMs, `models.csv`: one row per LLM (`model`), with its size
in billions of parameters (`params_b`; below 0, e.g. -1, is unknown), architecture (`arch`) and any scores. Optional: a folder
without one has no sizes, and every size filter then says so."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DataError

log = logging.getLogger("jeirt.data")
NUMERIC = ("params_b", "arc", "gsm8k", "mmlu", "truthfulqa", "winogrande", "hellaswag", "avg")


def read_models(folder: str | Path) -> pd.DataFrame | None:
    """`models.csv` of a results folder, indexed by model (None where there is none); its numeric
    columns (`params_b`, the leaderboard's scores) are checked to be numbers, row and column named."""
    path = Path(folder) / "models.csv"
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    if "model" not in table.columns:
        raise DataError(f"{path}: no column 'model' (columns: {', '.join(map(str, table.columns))})")
    dup = table["model"][table["model"].duplicated()]
    if len(dup):
        raise DataError(f"{path}: row {int(dup.index[0]) + 2}, column model: {dup.iloc[0]!r} is listed twice")
    for column in NUMERIC:
        if column in table.columns:
            values = pd.to_numeric(table[column], errors="coerce")
            bad = table[column].notna() & values.isna()
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise DataError(f"{path}: row {row + 2}, column {column}: {table[column].iloc[row]!r} is not a number")
            if column == "params_b" and (values < 0).any():  # the Open LLM Leaderboard's -1: size unknown
                unknown = np.flatnonzero(values < 0)
                log.info("%s: %d LLM(s) have params_b below 0 (first at row %d): taken as of unknown size", path,
                         len(unknown), unknown[0] + 2)
                values[values < 0] = np.nan
            table[column] = values
    table["model"] = table["model"].astype(str)
    return table.set_index("model")


def llm_info(table: pd.DataFrame | None, names) -> dict[str, dict]:
    """{LLM: {"params_b": size, "arch": ...}} for the LLMs `names` that `table` describes (what a
    space keeps of each LLM to filter and show them by)."""
    if table is None:
        return {}
    out = {}
    rows = table.reindex([str(n) for n in names])
    for name, row in rows.iterrows():
        info = {}
        if "params_b" in rows.columns and pd.notna(row["params_b"]):
            info["params_b"] = float(row["params_b"])
        if "arch" in rows.columns and pd.notna(row["arch"]):
            info["arch"] = str(row["arch"])
        if info:
            out[str(name)] = info
    return out
