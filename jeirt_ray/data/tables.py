"""Reading one table file (CSV, gzipped CSV or Parquet): what the loaders and importers share."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .errors import DataError


def read_table(path: Path) -> pd.DataFrame:
    """CSV (optionally gzipped) or Parquet, every column read as text except where parsed later."""
    name = path.name.lower()
    if not path.exists():
        raise DataError("file not found", file=str(path))
    if name.endswith(".parquet"):
        return pd.read_parquet(path)
    if name.endswith((".csv", ".csv.gz")):
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    raise DataError("unsupported file type (expected .csv, .csv.gz or .parquet)", file=str(path))
