"""Per-question results from other tools, into the long format.

- lm-evaluation-harness `--log_samples` output: one folder per model (the harness names it after
  the model) with `results_<date>.json` and `samples_<task>_<date>.jsonl`, or the same records as
  Parquet (`samples_<task>_<date>.parquet`, the Open LLM Leaderboard's "details"). A record holds
  `doc_id`, `doc`, `arguments` (`{"gen_args_0": {"arg_0": prompt, ...}}`), `resps`,
  `filtered_resps`, `filter`, `metrics` (the metric names), one value per metric, and
  `doc_hash` / `prompt_hash` / `target_hash` (lm_eval/evaluator.py and
  loggers/evaluation_tracker.py upstream).
- HELM run folders: `run_spec.json` (the model in `adapter_spec.model`), `scenario_state.json`
  (`request_states[].instance`: `id`, `input.text`) and `per_instance_stats.json` (per
  `instance_id` and `train_trial_index`, `stats[]` of `{name: {name, split, perturbation?}, mean}`).
- py-irt JSONL: `{"subject_id": ..., "responses": {item_id: 0 or 1}}` per line, with question
  texts from a side file (py-irt has none, and JE-IRT embeds the text).

Choices, each overridable: the label of a harness task is the first of DEFAULT_METRICS that its
records carry (`--metric TASK=NAME`), under the filter `none`, else `strict-match`, else the first
by name (`--filter TASK=NAME`); the question text is the prompt the model saw with the few-shot
examples cut off (the text after the task's last `fewshot_delimiter`), or a field of `doc`
(`--text-field`); the model name is the results file's `model_name` (else its `model_args`'
`pretrained=`, else the folder's name). A HELM label is `exact_match`, else
`quasi_exact_match` (`--metric NAME`), averaged over train trials, unperturbed instances only.
Question ids: `<task>/<doc_hash>` (the harness), `<run without model>/<instance_id>` (HELM).

A file or record that cannot be read is skipped and listed (file, record, field, value); the
rest is imported. The same (model, question) seen twice keeps the later file's label.
"""

from __future__ import annotations

import json
import re
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tqdm.auto import tqdm

from .dataset import ResponseData
from .errors import DataError
from .tables import read_table

FORMATS = ("harness", "helm", "pyirt")
DEFAULT_METRICS = ("acc", "exact_match", "pass@1", "pass_at_1", "em", "acc_norm", "f1")
HELM_METRICS = ("exact_match", "quasi_exact_match")
FILTER_PREFERENCE = ("none", "strict-match")
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.(?P<ext>jsonl|parquet)$")
_RESULTS = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")


@dataclass
class Collector:
    """Questions and labels as they are read: ids interned to integers, labels in compact arrays
    (12 bytes a response), so memory grows with the responses, not with the files' size."""

    question_pos: dict[str, int] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    model_pos: dict[str, int] = field(default_factory=dict)
    m: array = field(default_factory=lambda: array("i"))
    q: array = field(default_factory=lambda: array("i"))
    y: array = field(default_factory=lambda: array("f"))
    skipped: list[str] = field(default_factory=list)
    files: int = 0

    def question(self, qid: str, benchmark: str, text: str) -> int:
        pos = self.question_pos.get(qid)
        if pos is None:
            pos = self.question_pos[qid] = len(self.texts)
            self.texts.append(text)
            self.benchmarks.append(benchmark)
        return pos

    def add(self, model: str, question: int, label: float) -> None:
        self.m.append(self.model_pos.setdefault(model, len(self.model_pos)))
        self.q.append(question)
        self.y.append(label)

    def skip(self, problem: str, **where) -> None:
        self.skipped.append(str(DataError(problem, **where)))

    def to_data(self, name: str, mapping: dict[str, str] | None = None) -> ResponseData:
        if not self.y:
            raise DataError("nothing could be imported" + (f"; skipped: {self.skipped[:3]}" if self.skipped else ""))
        names = list(self.model_pos)
        canonical = [(mapping or {}).get(n, n) for n in names]
        models = np.array(sorted(set(canonical)), dtype=str)
        remap = np.searchsorted(models, np.array(canonical, dtype=str))
        m = remap[np.frombuffer(self.m, dtype=np.int32)]
        q = np.frombuffer(self.q, dtype=np.int32).astype(np.int64)
        y = np.frombuffer(self.y, dtype=np.float32).copy()
        # the same (model, question) twice: keep the last one read (the later file)
        key = m.astype(np.int64) * len(self.texts) + q
        _, last = np.unique(key[::-1], return_index=True)
        keep = np.sort(len(key) - 1 - last)
        ids = np.array(list(self.question_pos), dtype=str)
        return ResponseData(question_ids=ids, benchmarks=np.array(self.benchmarks, dtype=str),
                            texts=np.array(self.texts, dtype=str), models=models, q_idx=q[keep],
                            m_idx=m[keep].astype(np.int64), labels=y[keep], name=name)


def _where(path: Path | str, n: int | None) -> dict:
    """DataError's location of the n-th record: a line of a JSON-lines file, else a record."""
    if n is None:
        return {"file": str(path)}
    return {"file": str(path), ("record" if str(path).endswith(".parquet") else "line"): n}


def _label(value, where: dict, metric: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not np.isfinite(value) or not 0 <= value <= 1:
        raise DataError("the label metric is not a number in [0, 1]", **where, column=metric, value=value)
    return float(value)


# ---- lm-evaluation-harness -------------------------------------------------------------------

def _records(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
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


def _prompt(arguments) -> str | None:
    """The first request's context: `{"gen_args_0": {"arg_0": ...}}` as written to disk, or the
    in-memory `[[context, continuation], ...]`."""
    if isinstance(arguments, dict):
        first = arguments.get("gen_args_0")
        return first.get("arg_0") if isinstance(first, dict) else None
    if isinstance(arguments, list) and arguments and isinstance(arguments[0], (list, tuple)) and arguments[0]:
        return arguments[0][0]
    return None


@dataclass
class HarnessOptions:
    metrics: dict[str, str] = field(default_factory=dict)  # task -> metric
    filters: dict[str, str] = field(default_factory=dict)  # task -> filter
    text_field: str | None = None  # a field of `doc` instead of the prompt


def _model_info(folder: Path) -> tuple[str, dict]:
    """(model name, per-task config) from the folder's newest readable results file."""
    for path in sorted(folder.glob("results_*.json"), reverse=True):
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        name = results.get("model_name")
        if not name:
            args = str((results.get("config") or {}).get("model_args") or "")
            found = re.search(r"(?:^|,)\s*pretrained=([^,]+)", args)
            name = found[1] if found else None
        return name or folder.name, results.get("configs") or {}
    return folder.name, {}


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
    if not isinstance(prompt, str):
        return None
    if config.get("num_fewshot"):
        prompt = prompt.split(config.get("fewshot_delimiter") or "\n\n")[-1]
    return prompt.strip()


def read_harness_file(col: Collector, path: Path, model: str, config: dict, task: str, opts: HarnessOptions) -> None:
    file = str(path)
    records = []
    for n, rec, why in _records(path):
        if rec is None:
            col.skip(why, **_where(path, n))
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
                     f"with --metric {task}=NAME)", **_where(path, n), column="metrics", value=rec.get("metrics"))
            continue
        try:
            label = _label(rec[metric], _where(path, n), metric)
        except DataError as e:
            col.skipped.append(str(e))
            continue
        text = _question_text(rec, config, opts)
        if not text:
            col.skip("no question text", **_where(path, n),
                     column=f"doc.{opts.text_field}" if opts.text_field else "arguments")
            continue
        ident = rec.get("doc_hash") or rec.get("doc_id")
        if ident is None:
            col.skip("neither doc_hash nor doc_id", **_where(path, n))
            continue
        col.add(model, col.question(f"{task}/{ident}", task, text), label)
        used += 1
    if used == 0:
        col.skip(f"no usable record under filter {chosen!r}", file=file)


def harness_folders(src: Path) -> dict[Path, list[Path]]:
    """Every folder under `src` holding samples files, with them (oldest first)."""
    groups: dict[Path, list[Path]] = defaultdict(list)
    for path in src.rglob("samples_*"):
        if _SAMPLES.match(path.name):
            groups[path.parent].append(path)
    return {folder: sorted(files, key=lambda p: _SAMPLES.match(p.name)["date"]) for folder, files in sorted(groups.items())}


def read_harness(src: str | Path, opts: HarnessOptions | None = None, progress: bool = True) -> Collector:
    src, opts, col = Path(src), opts or HarnessOptions(), Collector()
    folders = harness_folders(src)
    if not folders:
        raise DataError("no lm-evaluation-harness samples files (samples_<task>_<date>.jsonl or .parquet) "
                        "under this folder", file=str(src))
    bar = tqdm(total=sum(len(f) for f in folders.values()), desc="importing harness samples", unit="file",
               disable=not progress)
    for folder, files in folders.items():
        model, configs = _model_info(folder)
        for path in files:
            task = _SAMPLES.match(path.name)["task"]
            try:
                read_harness_file(col, path, model, configs.get(task) or {}, task, opts)
            except (OSError, ValueError) as e:  # unreadable file (Parquet, encoding): the rest goes on
                col.skip(f"unreadable ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(path))
            col.files += 1
            bar.update()
    bar.close()
    return col


# ---- HELM ------------------------------------------------------------------------------------

def read_helm(src: str | Path, metric: str | None = None, progress: bool = True) -> Collector:
    src, col = Path(src), Collector()
    runs = sorted(p.parent for p in src.rglob("per_instance_stats.json"))
    if not runs:
        raise DataError("no HELM run folders (per_instance_stats.json) under this folder", file=str(src))
    for run in tqdm(runs, desc="importing HELM runs", unit="run", disable=not progress):
        col.files += 1
        try:
            spec = json.loads((run / "run_spec.json").read_text(encoding="utf-8"))
            state = json.loads((run / "scenario_state.json").read_text(encoding="utf-8"))
            stats = json.loads((run / "per_instance_stats.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            col.skip(f"unreadable run ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(run))
            continue
        model = (spec.get("adapter_spec") or {}).get("model")
        name = str(spec.get("name") or run.name)
        if not model:
            col.skip("run_spec.json names no adapter_spec.model", file=str(run / "run_spec.json"))
            continue
        scenario = re.sub(r"(^|,)model=[^,]*", "", name.split(":", 1)[1] if ":" in name else "").strip(",")
        benchmark = name.split(":", 1)[0]
        prefix = f"{benchmark}:{scenario}" if scenario else benchmark
        texts = {}
        for rs in state.get("request_states") or []:
            inst = rs.get("instance") or {}
            if inst.get("perturbation") or inst.get("id") is None:
                continue
            text = (inst.get("input") or {}).get("text")
            if isinstance(text, str) and text.strip():
                texts.setdefault(str(inst["id"]), text.strip())
        sums: dict[str, list[float]] = defaultdict(list)
        file = str(run / "per_instance_stats.json")
        for n, entry in enumerate(stats, 1):
            if entry.get("perturbation"):
                continue
            by_name = {s["name"]["name"]: s for s in entry.get("stats") or []
                       if isinstance(s.get("name"), dict) and not s["name"].get("perturbation")}
            chosen = metric or next((m for m in HELM_METRICS if m in by_name), None)
            if chosen is None or chosen not in by_name:
                col.skip(f"no label metric (tried {metric or list(HELM_METRICS)}; choose one with --metric NAME)",
                         file=file, record=n, column="stats", value=sorted(by_name)[:8])
                continue
            try:
                sums[str(entry.get("instance_id"))].append(_label(by_name[chosen].get("mean"),
                                                                  {"file": file, "record": n}, chosen))
            except DataError as e:
                col.skipped.append(str(e))
        for iid, values in sums.items():
            if iid not in texts:
                col.skip("instance has no input text in scenario_state.json", file=file, column="instance_id", value=iid)
                continue
            col.add(model, col.question(f"{prefix}/{iid}", benchmark, texts[iid]), float(np.mean(values)))
    return col


# ---- py-irt ----------------------------------------------------------------------------------

def read_pyirt(src: str | Path, texts: str | Path | None, progress: bool = True) -> Collector:
    src, col = Path(src), Collector()
    if texts is None:
        raise DataError("py-irt data has no question texts, and JE-IRT embeds each question's text: pass "
                        "--texts FILE (columns question_id, text and optionally benchmark)", file=str(src))
    table = read_table(Path(texts))
    missing = [c for c in ("question_id", "text") if c not in table.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; found {list(table.columns)}", file=str(texts))
    bench = table["benchmark"] if "benchmark" in table.columns else ["pyirt"] * len(table)
    known = {str(q): (str(t), str(b)) for q, t, b in zip(table["question_id"], table["text"], bench)}
    files = [src] if src.is_file() else sorted(src.glob("*.jsonl"))
    if not files:
        raise DataError("no .jsonl file here", file=str(src))
    for path in files:
        col.files += 1
        for n, rec, why in tqdm(_records(path), desc=f"importing {path.name}", unit="subject", disable=not progress):
            if rec is None:
                col.skip(why, **_where(path, n))
                continue
            subject, responses = rec.get("subject_id"), rec.get("responses")
            if subject is None or not isinstance(responses, dict):
                col.skip("a py-irt record needs subject_id and a responses object", **_where(path, n))
                continue
            for item, value in responses.items():
                if str(item) not in known:
                    col.skip("item has no text in the texts file", **_where(path, n), column="responses",
                             value=item)
                    continue
                try:
                    label = _label(value, _where(path, n), f"responses.{item}")
                except DataError as e:
                    col.skipped.append(str(e))
                    continue
                text, benchmark = known[str(item)]
                col.add(str(subject), col.question(str(item), benchmark, text), label)
    return col


# ---- names -----------------------------------------------------------------------------------

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


def import_results(fmt: str, src: str | Path, *, harness: HarnessOptions | None = None, metric: str | None = None,
                   texts: str | Path | None = None, mapping: dict[str, str] | None = None,
                   progress: bool = True) -> tuple[ResponseData, dict]:
    """(the dataset, a report: files, skipped items, near-duplicate model names)."""
    if fmt == "harness":
        col = read_harness(src, harness, progress)
    elif fmt == "helm":
        col = read_helm(src, metric, progress)
    elif fmt == "pyirt":
        col = read_pyirt(src, texts, progress)
    else:
        raise DataError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    data = col.to_data(Path(src).resolve().name, mapping)
    report = {"format": fmt, "source": str(src), "files": col.files, "models": data.n_models,
              "questions": data.n_questions, "responses": data.n_responses, "skipped": col.skipped,
              "near_duplicate_model_names": near_duplicate_names(data.models.tolist())}
    return data, report


def detect_format(path: Path) -> str | None:
    """'harness' or 'helm' when a folder holds such results (for `--data`), else None."""
    if next((p for p in path.rglob("samples_*") if _SAMPLES.match(p.name)), None) is not None:
        return "harness"
    if next(path.rglob("per_instance_stats.json"), None) is not None:
        return "helm"
    return None
