"""Reading one table file (CSV, gzipped CSV or Parquet): what the loaders and importers share."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .errors import DataError


def read_table(path: Path) -> pd.DataFrame:
    """CSV (optionally gzipped) or Parquet, every column read as text except where parsed later.
    An empty, undecodable or corrupt file is a DataError naming it."""
    path = Path(path)
    name = path.name.lower()
    if not path.exists():
        raise DataError("file not found", file=str(path))
    if path.is_dir():
        raise DataError("is a folder, not a table file", file=str(path))
    if not name.endswith((".parquet", ".csv", ".csv.gz")):
        raise DataError("unsupported file type (expected .csv, .csv.gz or .parquet)", file=str(path))
    if path.stat().st_size == 0:
        raise DataError("empty file (0 bytes): it needs a header row and data", file=str(path))
    try:
        if name.endswith(".parquet"):
            return pd.read_parquet(path)
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[], encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}): save the file as "
                        f"UTF-8", file=str(path)) from None
    except pd.errors.EmptyDataError:
        raise DataError("no columns: the file holds no header row", file=str(path)) from None
    except pd.errors.ParserError as e:
        raise DataError(f"not a well-formed CSV ({str(e).strip()})", file=str(path)) from None
    except (OSError, EOFError, ValueError) as e:  # a corrupt gzip or Parquet file
        raise DataError(f"cannot be read ({type(e).__name__}: {str(e)[:200]})", file=str(path)) from None
