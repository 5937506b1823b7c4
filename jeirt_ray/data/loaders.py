"""Importers: the generic long format (CSV, CSV.gz, Parquet) and the EmbedLLM CSVs.

Every check names the file, the row (1-based, header excluded), the column and the value.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .dataset import ResponseData
from .llm_table import llm_info, read_models
from .errors import DataError
from .importers import detect_format, import_results
from .tables import read_table
from .validate import (QUESTION_COLUMNS, RESPONSE_COLUMNS, first_index, parse_labels, require_columns,
                       validate_questions, validate_responses)

EMBEDLLM_COLUMNS = ("prompt_id", "prompt", "model_id", "model_name", "label", "category_id", "category")
EMBEDLLM_FILES = ("train.csv", "val.csv", "test.csv")
DuplicateRule = Literal["mean", "first", "last", "max", "error"]
log = logging.getLogger("jeirt.data")


def _find(directory: Path, stem: str) -> Path:
    found = [directory / f"{stem}{s}" for s in (".parquet", ".csv.gz", ".csv") if (directory / f"{stem}{s}").exists()]
    if len(found) > 1:
        raise DataError(f"{len(found)} files of one table: {', '.join(p.name for p in found)}; keep one (jeirt "
                        f"would read only one of them)", file=str(directory))
    if not found:
        raise DataError(f"no {stem}.parquet, {stem}.csv.gz or {stem}.csv in this folder", file=str(directory))
    return found[0]


def _not_empty(df: pd.DataFrame, what: str, file: str) -> None:
    if not len(df):
        raise DataError(f"no {what}: the table has a header but no rows", file=file)


def load_long_format(directory: str | Path, name: str | None = None) -> ResponseData:
    """A folder holding questions.{csv,csv.gz,parquet} and responses.{csv,csv.gz,parquet}."""
    d = _folder(directory)
    qfile, rfile = _find(d, "questions"), _find(d, "responses")
    qtable, rtable = read_table(qfile), read_table(rfile)
    require_columns(qtable, QUESTION_COLUMNS, str(qfile))
    require_columns(rtable, RESPONSE_COLUMNS, str(rfile))
    _not_empty(qtable, "questions", str(qfile))
    _not_empty(rtable, "responses", str(rfile))
    questions = validate_questions(qtable, str(qfile))
    responses = validate_responses(rtable, pd.Index(questions["question_id"]), str(rfile))
    data = ResponseData.from_frames(questions, responses, name=name or d.resolve().name, validated=True)
    data.extra["folder"] = str(d)  # where side files (answer lengths, models.csv) are found
    data.extra["llms"] = llm_info(read_models(d), data.models)
    return data


def load_embedllm(directory: str | Path, duplicates: DuplicateRule = "mean") -> ResponseData:
    """The EmbedLLM CSVs (train/val/test.csv), merged into one dataset; splits are made anew.

    The EmbedLLM files repeat some (model, prompt) pairs. `duplicates` decides what one label
    such a pair gets: "mean" (default: the average, a soft label that keeps both observations),
    "first" or "last" (in file order train, val, test), "max", or "error" (refuse the data).
    """
    d = Path(directory)
    frames = []
    for fname in EMBEDLLM_FILES:
        p = d / fname
        if not p.exists():
            continue
        df = read_table(p)
        require_columns(df, EMBEDLLM_COLUMNS, str(p))
        labels = parse_labels(df, "label", str(p))
        empty = (df["prompt"].astype(str).str.strip() == "").to_numpy()
        if empty.any():
            i = first_index(empty)
            raise DataError("empty prompt", file=str(p), row=i + 1, column="prompt", value=df["prompt"].iloc[i])
        frames.append(pd.DataFrame({"question_id": df["prompt_id"].astype(str), "text": df["prompt"].astype(str),
                                    "benchmark": df["category"].astype(str),
                                    "model": df["model_name"].astype(str), "label": labels,
                                    "file": fname, "row": np.arange(1, len(df) + 1)}))
    if not frames:
        raise DataError(f"none of {list(EMBEDLLM_FILES)} found", file=str(d))
    rows = pd.concat(frames, ignore_index=True)

    # One text and one category per prompt_id, or the files disagree with each other.
    per_q = rows.drop_duplicates("question_id")
    conflict = rows.merge(per_q[["question_id", "text"]], on="question_id", suffixes=("", "_first"))
    bad = (conflict["text"] != conflict["text_first"]).to_numpy()
    if bad.any():
        r = conflict.iloc[first_index(bad)]
        raise DataError(f"prompt_id {r['question_id']} has two different prompts", file=str(d / r["file"]),
                        row=int(r["row"]), column="prompt", value=r["text"][:80])

    dup = rows.duplicated(["model", "question_id"], keep=False).to_numpy()
    if dup.any() and duplicates == "error":
        r = rows.iloc[first_index(rows.duplicated(["model", "question_id"]).to_numpy())]
        raise DataError("duplicate (model_name, prompt_id) pair (choose a rule with duplicates=...)",
                        file=str(d / r["file"]), row=int(r["row"]), column="prompt_id",
                        value=f"{r['model']} / {r['question_id']}")
    agg = {"mean": "mean", "first": "first", "last": "last", "max": "max"}.get(duplicates, "first")
    responses = rows.groupby(["model", "question_id"], sort=False, as_index=False)["label"].agg(agg)
    questions = per_q[["question_id", "benchmark", "text"]].reset_index(drop=True)
    return ResponseData.from_frames(questions, responses, name="embedllm")


def load_data(path: str | Path, *, embedllm_duplicates: DuplicateRule = "mean") -> ResponseData:
    """Load a dataset folder in whichever supported format it holds: the long format, the
    EmbedLLM CSVs, or (imported on the fly with the default choices of data/importers/)
    lm-evaluation-harness samples or HELM runs."""
    d = _folder(path)
    if (d / "train.csv").exists() and not any(d.glob("questions.*")):
        return load_embedllm(d, embedllm_duplicates)
    if not any(d.glob("questions.*")):
        fmt = detect_format(d)
        if fmt is not None:
            data, report = import_results(fmt, d, progress=False)
            _report_skipped(report, d, fmt)
            return data
    return load_long_format(d)


def _folder(path: str | Path) -> Path:
    """The dataset folder, or a DataError that says what was given instead."""
    d = Path(path)
    if d.is_file():
        raise DataError(f"is a file, not a dataset folder: give the folder that holds it ({d.parent}), with "
                        f"questions.* and responses.* (or harness, HELM or EmbedLLM files)", file=str(d))
    if not d.exists():
        raise DataError("no such folder: give a dataset folder holding questions.* and responses.* (or harness, "
                        "HELM or EmbedLLM files)", file=str(d))
    return d


def _report_skipped(report: dict, folder: Path, fmt: str) -> None:
    """What an import on the fly left out, said on the `jeirt` logger (the CLI shows it)."""
    skipped = report["skipped"]
    if skipped:
        log.warning("%s: %d item(s) skipped while reading the %s results, e.g. %s (`jeirt data import %s %s --out "
                    "DIR` writes all of them to import_report.json)", folder, len(skipped), fmt, skipped[0], fmt,
                    folder)


def fetch_embedllm(target: str | Path) -> Path:
    """Download the EmbedLLM CSVs from the Hugging Face hub (dataset RZ412/EmbedLLM)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - installed with sentence-transformers
        raise RuntimeError("huggingface_hub is needed: pip install 'jeirt-ray[hub]'") from e
    target = Path(target)
    try:
        snapshot = Path(snapshot_download("RZ412/EmbedLLM", repo_type="dataset", allow_patterns=["*.csv"],
                                          local_dir=target / "_hub"))
    except Exception as e:
        raise RuntimeError(f"could not download RZ412/EmbedLLM from the Hugging Face hub ({type(e).__name__}: "
                           f"{e}). Download train.csv, val.csv and test.csv by hand into {target}.") from e
    target.mkdir(parents=True, exist_ok=True)
    for fname in EMBEDLLM_FILES:
        found = sorted(snapshot.rglob(fname))
        if not found:
            raise RuntimeError(f"{fname} not found in the downloaded RZ412/EmbedLLM snapshot at {snapshot}")
        (target / fname).write_bytes(found[0].read_bytes())
    return target
