"""Answer keys: grading an LLM's raw answer to a question as right or wrong.

An answer key is a table (CSV, CSV.gz or Parquet) with the columns `question_id`, `answer` and
optionally `kind` (default: the `default_kind` given when reading) and `n_options` (a multiple-choice
question's number of options: its letter must be among them); other columns are ignored:

- `letter`: a multiple-choice letter A-J, extracted with MMLU-Pro's rule (TIGER-AI-Lab/MMLU-Pro,
  compute_accuracy.py): the letter of "answer is (X)" or "answer is X", else of the last
  "Answer: X", else the last letter A-J standing alone in the text. No letter: wrong (MMLU-Pro
  draws a random option instead; a grade here does not depend on chance).
- `letter_strict`: the first of those rules alone ("answer is (X)"), as MMLU-Pro's earlier runs
  graded (of its recorded outputs, DeepSeek-V2's and Phi-3-mini's labels follow this rule, Llama
  3.1's and Gemini 1.5's the full one).
- `number`: the number after the last "answer is" (or "Answer:"), else the last number in the
  text (thousands separators and a trailing `.` dropped), equal to the key's within a relative
  1e-4 (or 1e-9 absolute).
- `exact`: the text after the last "answer is" (or "Answer:"), else the last non-empty line,
  compared with the key without case, surrounding spaces, quotes, `$`, `**` or a final `.`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .errors import DataError
from .tables import read_table

KINDS = ("letter", "letter_strict", "number", "exact")
LETTERS = "ABCDEFGHIJ"

_LETTER_1 = re.compile(r"answer is \(?([A-J])\)?")
_LETTER_2 = re.compile(r".*[aA]nswer:\s*([A-J])")
_LETTER_3 = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)
_FINAL = re.compile(r"(?:answer is|[aA]nswer:)\s*:?\s*(.+)", re.IGNORECASE)
_OPTION = re.compile(r"^\(?([A-J])[.)]\s", re.MULTILINE)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def extract_letter(text: str, strict: bool = False) -> str | None:
    """MMLU-Pro's extraction (module docstring; `strict`: its first rule alone); None where no
    letter is found."""
    if strict:
        found = _LETTER_1.search(text)
        return found.group(1) if found else None
    for pattern in (_LETTER_1, _LETTER_2):
        found = pattern.search(text)
        if found:
            return found.group(1)
    found = _LETTER_3.search(text)
    return found.group(0) if found else None


def _final_answer(text: str) -> str | None:
    found = list(_FINAL.finditer(text))
    return found[-1].group(1).strip().splitlines()[0] if found else None


def extract_number(text: str) -> float | None:
    """The number of the final answer, else the last number in the text; None if there is none."""
    for part in (_final_answer(text), text):
        if part:
            numbers = _NUMBER.findall(part)
            if numbers:
                return float(numbers[0 if part is not text else -1].replace(",", ""))
    return None


def options_in(text: str) -> int:
    """How many options a multiple-choice question's text lists as lines "A. ...", "(B) ...", in
    order from A (0: none)."""
    present = set(_OPTION.findall(text))
    n = 0
    while n < len(LETTERS) and LETTERS[n] in present:
        n += 1
    return n


def normalise(text: str) -> str:
    text = text.strip().replace("**", "").replace("$", "")
    return text.rstrip(".").strip().strip("\"'`").strip().casefold()


def extract_exact(text: str) -> str | None:
    final = _final_answer(text)
    if final is None:
        lines = [line for line in text.splitlines() if line.strip()]
        final = lines[-1] if lines else None
    return None if final is None else normalise(final)


@dataclass(frozen=True)
class Grade:
    label: float  # 1.0 right, 0.0 wrong
    extracted: str | None  # what was read from the answer (None: nothing to grade, counted wrong)


class AnswerKey:
    """{question_id: (answer, kind)}, read from a documented file (module docstring)."""

    def __init__(self, answers: dict[str, tuple[str, str]], source: str = "answer key"):
        self.answers, self.source = answers, source

    def __len__(self) -> int:
        return len(self.answers)

    def __contains__(self, question_id: str) -> bool:
        return question_id in self.answers

    @classmethod
    def read(cls, path: str | Path, default_kind: str = "letter") -> "AnswerKey":
        """Read and check a key file; a bad row is a DataError naming file, row, column and value."""
        if default_kind not in KINDS:
            raise ValueError(f"unknown answer kind {default_kind!r}: one of {', '.join(KINDS)}")
        path = Path(path)
        table = _table(path, "answer key", ("question_id", "answer"), " (and optionally kind)")
        kinds = table["kind"] if "kind" in table.columns else pd.Series([default_kind] * len(table))
        options = table["n_options"] if "n_options" in table.columns else pd.Series([None] * len(table))
        answers: dict[str, tuple[str, str]] = {}
        for row, (qid, answer, kind, n_options) in enumerate(zip(table["question_id"], table["answer"], kinds, options),
                                                             start=1):
            kind = "" if kind is None or (isinstance(kind, float) and math.isnan(kind)) else str(kind).strip()
            kind = kind or default_kind
            if kind not in KINDS:
                raise DataError(f"unknown kind: one of {', '.join(KINDS)}", file=str(path), row=row, column="kind",
                                value=kind)
            qid = _question_id(qid, answers, path, row)
            if answer is None or (isinstance(answer, float) and math.isnan(answer)) or not str(answer).strip():
                raise DataError("empty answer", file=str(path), row=row, column="answer")
            answer = str(answer).strip()
            if kind.startswith("letter") and answer.upper() not in LETTERS:
                raise DataError("a letter answer must be one of A-J", file=str(path), row=row, column="answer",
                                value=answer)
            if kind.startswith("letter") and _given(n_options):
                n = _options(n_options, path, row)
                if LETTERS.index(answer.upper()) >= n:
                    raise DataError(f"the letter is beyond the question's {n} options (A-{LETTERS[n - 1]})",
                                    file=str(path), row=row, column="answer", value=answer)
            if kind == "number":
                try:
                    finite = math.isfinite(float(answer.replace(",", "")))
                except ValueError:
                    finite = False
                if not finite:
                    raise DataError("a number answer must be a finite number", file=str(path), row=row,
                                    column="answer", value=answer)
            answers[qid] = (answer.upper() if kind.startswith("letter") else answer, kind)
        if not answers:
            raise DataError("the answer key has no rows", file=str(path))
        return cls(answers, str(path))

    def check_options(self, texts: dict[str, str]) -> None:
        """Refuse letter answers beyond the options their question's text lists (`options_in`;
        texts that list none are not checked)."""
        beyond = []
        for qid, (answer, kind) in self.answers.items():
            n = options_in(texts[qid]) if kind.startswith("letter") and qid in texts else 0
            if n and LETTERS.index(answer) >= n:
                beyond.append(f"{qid} (answer {answer}, options A-{LETTERS[n - 1]})")
        if beyond:
            raise DataError(f"{len(beyond)} letter answer(s) beyond their question's options, e.g. "
                            f"{'; '.join(beyond[:3])}: is it the key of these questions?", file=self.source)

    def grade(self, question_id: str, output: str) -> Grade:
        """Right or wrong, and what was extracted from `output`."""
        answer, kind = self.answers[question_id]
        if kind.startswith("letter"):
            got = extract_letter(output, strict=kind == "letter_strict")
            return Grade(float(got == answer), got)
        if kind == "number":
            got = extract_number(output)
            if got is None:
                return Grade(0.0, None)
            return Grade(float(math.isclose(got, float(answer.replace(",", "")), rel_tol=1e-4, abs_tol=1e-9)), f"{got:g}")
        got = extract_exact(output)
        return Grade(float(got is not None and got == normalise(answer)), got)


def read_graded(path: str | Path) -> dict[str, float]:
    """An LLM's graded answers (`question_id`, `label` in [0, 1]; CSV, CSV.gz or Parquet) as
    {question id: label}; a bad row is a DataError naming file, row, column and value."""
    path = Path(path)
    table = _table(path, "file of graded answers", ("question_id", "label"))
    graded: dict[str, float] = {}
    for row, (qid, label) in enumerate(zip(table["question_id"], table["label"]), start=1):
        qid = _question_id(qid, graded, path, row)
        try:
            value = float(label)
        except (TypeError, ValueError):
            value = math.nan
        if not 0.0 <= value <= 1.0:  # NaN fails too
            raise DataError("a label must be a number from 0 (wrong) to 1 (right)", file=str(path), row=row,
                            column="label", value=label)
        graded[qid] = value
    return graded


def _given(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and str(value).strip() != ""


def _options(value, path: Path, row: int) -> int:
    try:
        n = float(value)
    except (TypeError, ValueError):
        n = math.nan
    if not (n.is_integer() and 2 <= n <= len(LETTERS)):
        raise DataError(f"n_options must be a whole number from 2 to {len(LETTERS)}", file=str(path), row=row,
                        column="n_options", value=value)
    return int(n)


def _table(path: Path, what: str, columns: tuple[str, ...], optional: str = "") -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"no such {what}", file=str(path))
    table = read_table(path)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise DataError(f"the {what} needs the columns {', '.join(columns)}{optional}; missing {missing}, found "
                        f"{list(table.columns)}", file=str(path))
    return table


def _question_id(qid, seen: dict, path: Path, row: int) -> str:
    """The row's question id, stripped; a DataError if it is empty or already in `seen`."""
    if qid is None or (isinstance(qid, float) and math.isnan(qid)) or not str(qid).strip():
        raise DataError("empty question_id", file=str(path), row=row, column="question_id")
    qid = str(qid).strip()
    if qid in seen:
        raise DataError("question_id given twice", file=str(path), row=row, column="question_id", value=qid)
    return qid

