"""lm-evaluation-harness `--log_samples` output (jsonl or parquet samples, results files)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from tqdm.auto import tqdm

from ..errors import DataError
from .collector import LFS_FIX, Collector, is_lfs_pointer, label_value, place_of

DEFAULT_METRICS = ("acc", "exact_match", "pass@1", "pass_at_1", "em", "acc_norm", "f1")
FILTER_PREFERENCE = ("none", "strict-match")
_RESULTS = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")
SAMPLES_FILE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.(?P<ext>jsonl|parquet)$")


def read_records(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """(1-based line, or record number in a Parquet file; the record or None; why not)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        pf = pq.ParquetFile(path)
        n = 0
        for batch in pf.iter_batches(batch_size=4096):
            for rec in batch.to_pylist():
                n += 1
                yield n, rec, None
        return
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                yield n, None, f"not a JSON record ({e.msg})"
                continue
            yield (n, rec, None) if isinstance(rec, dict) else (n, None, "not a JSON object")


def _prompt(arguments):
    """The first request's context: `{"gen_args_0": {"arg_0": ...}}` as written to disk, or the
    in-memory `[[context, continuation], ...]`."""
    if isinstance(arguments, dict):
        first = arguments.get("gen_args_0")
        return first.get("arg_0") if isinstance(first, dict) else None
    if isinstance(arguments, list) and arguments and isinstance(arguments[0], (list, tuple)) and arguments[0]:
        return arguments[0][0]
    return None


def _chat_messages(prompt) -> list[dict] | None:
    """A chat-template run's context (`--apply_chat_template`, API and chat-completions models):
    the messages as a JSON-encoded list (lm_eval's JsonChatStr), that string wrapped in a list
    (the NamedTuple as JSON), or the list itself; None for a plain prompt."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        stripped = prompt.lstrip()
        if not stripped.startswith("[") or '"role"' not in stripped[:200]:
            return None
        try:
            prompt = json.loads(stripped)
        except json.JSONDecodeError:
            return None
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
        return prompt
    return None


def _content_text(content) -> str:
    """A message's content: a string, or OpenAI's list of parts (`{"type": "text", "text": ...}`)."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


@dataclass
class HarnessOptions:
    metrics: dict[str, str] = field(default_factory=dict)  # task -> metric
    filters: dict[str, str] = field(default_factory=dict)  # task -> filter
    text_field: str | None = None  # a field of `doc` instead of the prompt


@dataclass
class Run:
    """One harness run: its results file (which names the model) and datetime."""
    model: str | None
    configs: dict
    results: Path | None
    name_from: str


def _run_of_results(path: Path) -> Run:
    """The model a results file names: `model_name`, else `model_args`' `pretrained=`/`model=`."""
    results = json.loads(path.read_text(encoding="utf-8"))
    name, source = results.get("model_name"), f"model_name in {path.name}"
    if not name:
        args = str((results.get("config") or {}).get("model_args") or "")
        found = re.search(r"(?:^|,)\s*(?:pretrained|model)=([^,]+)", args)
        name, source = (found[1], f"model_args in {path.name}") if found else (None, "")
    return Run(name, results.get("configs") or {}, path, source)


def harness_runs(col: Collector, folder: Path) -> dict[str, Run]:
    """Every run in a folder, by datetime: several models' runs may lie side by side (a plain
    --output_path), and a samples file belongs to the results file with the same datetime."""
    runs = {}
    for path in sorted(folder.glob("results_*.json")):
        date = _RESULTS.match(path.name)
        if not date:
            continue
        if is_lfs_pointer(path):
            col.skip(LFS_FIX, file=str(path))
            continue
        try:
            runs[date["date"]] = _run_of_results(path)
        except (OSError, ValueError) as e:
            col.skip(f"unreadable results file ({type(e).__name__})", file=str(path))
    return runs


def _model_of(folder: Path, date: str, runs: dict[str, Run]) -> Run | None:
    """The run a samples file of `date` belongs to; without any results file in the folder, the
    folder names the model (`<org>__<model>` as the harness and the leaderboard name it); None
    when the folder has results files but none of this run's (which model ran it is unknown)."""
    run = runs.get(date)
    if run is not None and run.model:
        return run
    if (not runs and not list(folder.glob("results_*.json"))) or (run is not None and len(runs) == 1):
        return Run(folder.name.replace("__", "/"), {}, None, f"the folder name {folder.name!r}")
    return None


def _pick_filter(filters: Iterable[str], override: str | None) -> str:
    present = set(filters)
    if override:
        return override
    for f in FILTER_PREFERENCE:
        if f in present:
            return f
    return sorted(present)[0]


def _pick_metric(rec: dict, override: str | None) -> str | None:
    if override:
        return override
    named = rec.get("metrics") if isinstance(rec.get("metrics"), list) else list(rec)
    return next((m for m in DEFAULT_METRICS if m in named and m in rec), None)


def _question_text(rec: dict, config: dict, opts: HarnessOptions) -> str | None:
    if opts.text_field:
        doc = rec.get("doc")
        value = doc.get(opts.text_field) if isinstance(doc, dict) else None
        return None if value is None else str(value)
    prompt = _prompt(rec.get("arguments"))
    chat = _chat_messages(prompt)
    if chat is not None:  # few-shot examples are earlier turns: the question is the last user turn
        users = [_content_text(m.get("content")) for m in chat if m.get("role") == "user"]
        return users[-1].strip() if users else None
    if not isinstance(prompt, str):
        return None
    if config.get("num_fewshot"):
        prompt = prompt.split(config.get("fewshot_delimiter") or "\n\n")[-1]
    return prompt.strip()


def read_harness_file(col: Collector, path: Path, model: str, config: dict, task: str, opts: HarnessOptions) -> None:
    file = str(path)
    records = []
    for n, rec, why in read_records(path):
        if rec is None:
            col.skip(why, **place_of(path, n))
        else:
            records.append((n, rec))
    if not records:
        col.skip("no readable records", file=file)
        return
    chosen = _pick_filter((str(r.get("filter", "none")) for _, r in records), opts.filters.get(task))
    used = 0
    for n, rec in records:
        if str(rec.get("filter", "none")) != chosen:
            continue
        metric = _pick_metric(rec, opts.metrics.get(task))
        if metric is None or metric not in rec:
            col.skip(f"no label metric (tried {opts.metrics.get(task) or list(DEFAULT_METRICS)}; choose one "
                     f"with --metric {task}=NAME)", **place_of(path, n), column="metrics", value=rec.get("metrics"))
            continue
        try:
            label = label_value(rec[metric], place_of(path, n), metric)
        except DataError as e:
            col.skipped.append(str(e))
            continue
        text = _question_text(rec, config, opts)
        if not text:
            col.skip("no question text", **place_of(path, n),
                     column=f"doc.{opts.text_field}" if opts.text_field else "arguments")
            continue
        ident = rec.get("doc_hash") or rec.get("doc_id")
        if ident is None:
            col.skip("neither doc_hash nor doc_id", **place_of(path, n))
            continue
        col.add(model, col.question(f"{task}/{ident}", task, text), label)
        used += 1
    if used == 0:
        col.skip(f"no usable record under filter {chosen!r}", file=file)


def harness_files(src: Path) -> list[Path]:
    """Every samples file under `src`, oldest run first (so that a later run's label wins)."""
    files = [p for p in src.rglob("samples_*") if SAMPLES_FILE.match(p.name)]
    return sorted(files, key=lambda p: (SAMPLES_FILE.match(p.name)["date"], str(p)))


def read_harness(src: str | Path, opts: HarnessOptions | None = None, progress: bool = True) -> Collector:
    src, opts, col = Path(src), opts or HarnessOptions(), Collector()
    files = harness_files(src)
    if not files:
        raise DataError("no lm-evaluation-harness samples files (samples_<task>_<date>.jsonl or .parquet) "
                        "under this folder", file=str(src))
    runs: dict[Path, dict[str, Run]] = {}
    for path in tqdm(files, desc="importing harness samples", unit="file", disable=not progress):
        col.files += 1
        name = SAMPLES_FILE.match(path.name)
        if path.parent not in runs:
            runs[path.parent] = harness_runs(col, path.parent)
        if is_lfs_pointer(path):
            col.skip(LFS_FIX, file=str(path))
            continue
        run = _model_of(path.parent, name["date"], runs[path.parent])
        if run is None:
            known = sorted({r.model for r in runs[path.parent].values() if r.model})
            col.skip(f"which model ran it is unknown: no results_{name['date']}.json beside it names one (the "
                     f"folder's results files name {known[:5]}); refused rather than given another run's model",
                     file=str(path))
            continue
        col.name_sources.setdefault(run.model, run.name_from)
        try:
            read_harness_file(col, path, run.model, run.configs.get(name["task"]) or {}, name["task"], opts)
        except (OSError, ValueError) as e:  # unreadable file (Parquet, encoding): the rest goes on
            col.skip(f"unreadable ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(path))
    return col
