"""The long format's checks, shared by the folder loader and ResponseData.from_frames: every bad
value a DataError naming its file, row, column and value."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import DataError

QUESTION_COLUMNS = ("question_id", "benchmark", "text")
RESPONSE_COLUMNS = ("model", "question_id", "label")


def require_columns(df: pd.DataFrame, columns: tuple[str, ...], file: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; found {list(df.columns)}", file=file)


def first_index(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def parse_labels(df: pd.DataFrame, column: str, file: str) -> np.ndarray:
    raw = df[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        i = first_index(bad)
        raise DataError("label is not a number (NaN, empty or text)", file=file, row=i + 1,
                        column=column, value=raw.iloc[i])
    out_of_range = (values < 0) | (values > 1)
    if out_of_range.any():
        i = first_index(out_of_range)
        raise DataError("label is outside [0, 1]", file=file, row=i + 1, column=column,
                        value=float(values[i]))
    return values.astype(np.float32)


def validate_questions(df: pd.DataFrame, file: str) -> pd.DataFrame:
    require_columns(df, QUESTION_COLUMNS, file)
    df = df.reset_index(drop=True)
    for col in QUESTION_COLUMNS:
        values = df[col].astype(str)
        empty = (df[col].isna() | (values.str.strip() == "")).to_numpy()
        if empty.any():
            i = first_index(empty)
            raise DataError(f"empty {col}", file=file, row=i + 1, column=col, value=df[col].iloc[i])
    dup = df["question_id"].duplicated().to_numpy()
    if dup.any():
        i = first_index(dup)
        raise DataError("duplicate question_id", file=file, row=i + 1, column="question_id",
                        value=df["question_id"].iloc[i])
    return df[list(QUESTION_COLUMNS)].astype(str)


def validate_responses(df: pd.DataFrame, known_questions: pd.Index, file: str) -> pd.DataFrame:
    require_columns(df, RESPONSE_COLUMNS, file)
    df = df.reset_index(drop=True)
    empty_model = (df["model"].isna() | (df["model"].astype(str).str.strip() == "")).to_numpy()
    if empty_model.any():
        i = first_index(empty_model)
        raise DataError("empty model name", file=file, row=i + 1, column="model", value=df["model"].iloc[i])
    labels = parse_labels(df, "label", file)
    qids = df["question_id"].astype(str)
    unknown = ~qids.isin(known_questions).to_numpy()
    if unknown.any():
        i = first_index(unknown)
        raise DataError("response to a question that is not in the questions file", file=file,
                        row=i + 1, column="question_id", value=qids.iloc[i])
    out = pd.DataFrame({"model": df["model"].astype(str), "question_id": qids, "label": labels})
    dup = out.duplicated(["model", "question_id"]).to_numpy()
    if dup.any():
        i = first_index(dup)
        first = int(np.flatnonzero((out["model"] == out["model"].iloc[i]).to_numpy()
                                   & (out["question_id"] == qids.iloc[i]).to_numpy())[0])
        raise DataError(f"duplicate (model, question_id) pair, first seen at row {first + 1}",
                        file=file, row=i + 1, column="question_id",
                        value=f"{out['model'].iloc[i]} / {qids.iloc[i]}")
    return out
