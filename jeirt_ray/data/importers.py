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

FORMATS = ("harness", "leaderboard", "lighteval", "helm", "pyirt")
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
    name_sources: dict[str, str] = field(default_factory=dict)  # model -> where its name came from
    notes: list[str] = field(default_factory=list)  # choices made for the whole import

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

    def to_data(self, name: str, mapping: dict[str, str] | None = None) -> tuple[ResponseData, dict]:
        """(the dataset, per model: labels read and kept, duplicates dropped, the names merged into
        it and where its name came from). The same (model, question) read twice keeps the label
        read last: runs are read oldest first, so that is the latest run's."""
        if not self.y:
            raise DataError("nothing could be imported" + (f"; skipped: {self.skipped[:3]}" if self.skipped else ""))
        names = list(self.model_pos)
        canonical = [(mapping or {}).get(n, n) for n in names]
        models = np.array(sorted(set(canonical)), dtype=str)
        remap = np.searchsorted(models, np.array(canonical, dtype=str))
        m = remap[np.frombuffer(self.m, dtype=np.int32)]
        q = np.frombuffer(self.q, dtype=np.int32).astype(np.int64)
        y = np.frombuffer(self.y, dtype=np.float32).copy()
        key = m.astype(np.int64) * len(self.texts) + q
        _, last = np.unique(key[::-1], return_index=True)
        keep = np.sort(len(key) - 1 - last)
        read, kept = np.bincount(m, minlength=len(models)), np.bincount(m[keep], minlength=len(models))
        merged: dict[str, list[str]] = defaultdict(list)
        for n, c in zip(names, canonical):
            merged[c].append(n)
        per_model = {str(mod): {"labels_read": int(read[i]), "labels_kept": int(kept[i]),
                                "duplicates_dropped": int(read[i] - kept[i]),
                                "names": sorted(merged[str(mod)]),
                                "name_from": sorted({self.name_sources.get(n, "the source") for n in merged[str(mod)]})}
                     for i, mod in enumerate(models)}
        ids = np.array(list(self.question_pos), dtype=str)
        data = ResponseData(question_ids=ids, benchmarks=np.array(self.benchmarks, dtype=str),
                            texts=np.array(self.texts, dtype=str), models=models, q_idx=q[keep],
                            m_idx=m[keep].astype(np.int64), labels=y[keep], name=name)
        return data, per_model


def _where(path: Path | str, n: int | None) -> dict:
    """DataError's location of the n-th record: a line of a JSON-lines file, else a record."""
    if n is None:
        return {"file": str(path)}
    return {"file": str(path), ("record" if str(path).endswith(".parquet") else "line"): n}


LFS_POINTER = b"version https://git-lfs.github.com/spec/"
LFS_FIX = "a Git LFS pointer, not the data: run `git lfs pull` in the repository it came from"


def is_lfs_pointer(path: Path) -> bool:
    """A ~130-byte Git LFS stub (`version https://git-lfs.github.com/spec/v1`, `oid sha256:...`,
    `size ...`) checked out in place of the file."""
    try:
        with path.open("rb") as f:
            return f.read(len(LFS_POINTER)) == LFS_POINTER
    except OSError:
        return False


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


def harness_files(src: Path) -> list[Path]:
    """Every samples file under `src`, oldest run first (so that a later run's label wins)."""
    files = [p for p in src.rglob("samples_*") if _SAMPLES.match(p.name)]
    return sorted(files, key=lambda p: (_SAMPLES.match(p.name)["date"], str(p)))


def read_harness(src: str | Path, opts: HarnessOptions | None = None, progress: bool = True) -> Collector:
    src, opts, col = Path(src), opts or HarnessOptions(), Collector()
    files = harness_files(src)
    if not files:
        raise DataError("no lm-evaluation-harness samples files (samples_<task>_<date>.jsonl or .parquet) "
                        "under this folder", file=str(src))
    runs: dict[Path, dict[str, Run]] = {}
    for path in tqdm(files, desc="importing harness samples", unit="file", disable=not progress):
        col.files += 1
        name = _SAMPLES.match(path.name)
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


# ---- HELM ------------------------------------------------------------------------------------

def read_helm(src: str | Path, metric: str | None = None, progress: bool = True) -> Collector:
    src, col = Path(src), Collector()
    runs = sorted(p.parent for p in src.rglob("per_instance_stats.json"))
    if not runs:
        raise DataError("no HELM run folders (per_instance_stats.json) under this folder", file=str(src))
    for run in tqdm(runs, desc="importing HELM runs", unit="run", disable=not progress):
        col.files += 1
        stubs = [p for p in (run / "run_spec.json", run / "scenario_state.json", run / "per_instance_stats.json")
                 if is_lfs_pointer(p)]
        if stubs:
            col.skip(LFS_FIX, file=str(stubs[0]))
            continue
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
        choices = str((spec.get("adapter_spec") or {}).get("method") or "").startswith("multiple_choice")
        texts = {}
        for rs in state.get("request_states") or []:
            inst = rs.get("instance") or {}
            if inst.get("perturbation") or inst.get("id") is None:
                continue
            text = (inst.get("input") or {}).get("text")
            if isinstance(text, str) and text.strip():
                texts.setdefault(str(inst["id"]), _helm_text(text.strip(), inst, choices))
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


def _helm_text(text: str, instance: dict, choices: bool) -> str:
    """A multiple-choice instance's input with its options (the references the model chose from),
    lettered as HELM's joint adapter shows them: what the model saw, and what the question's
    embedding should carry."""
    refs = [((r.get("output") or {}).get("text") or "").strip() for r in instance.get("references") or []]
    if not choices or len(refs) < 2:
        return text
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return text + "\n" + "\n".join(f"{letters[i] if i < 26 else i + 1}. {r}" for i, r in enumerate(refs))


# ---- py-irt ----------------------------------------------------------------------------------

def _pyirt_items(files: list[Path], limit: int = 2000) -> list[str]:
    """Up to `limit` item ids, to tell whether they are texts (py-irt's amortized input)."""
    items: list[str] = []
    for path in files:
        for _, rec, _ in _records(path):
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
        for n, rec, why in tqdm(_records(path), desc=f"importing {path.name}", unit="subject", disable=not progress):
            if rec is None:
                col.skip(why, **_where(path, n))
                continue
            subject, responses = rec.get("subject_id"), rec.get("responses")
            if subject is None or not isinstance(responses, dict):
                col.skip("a py-irt record needs subject_id and a responses object", **_where(path, n))
                continue
            for item, value in responses.items():
                if known is not None and str(item) not in known:
                    col.skip("item has no text in the texts file", **_where(path, n), column="responses",
                             value=item)
                    continue
                try:
                    label = _label(value, _where(path, n), f"responses.{item}")
                except DataError as e:
                    col.skipped.append(str(e))
                    continue
                text, benchmark = known[str(item)] if known is not None else (str(item), "pyirt")
                col.add(str(subject), col.question(str(item), benchmark, text), label)
    return col


# ---- lighteval details (the Open LLM Leaderboard v1) ------------------------------------------

_DETAILS = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.parquet$")


def _lighteval_model(path: Path, src: Path) -> tuple[str, str] | None:
    """(model, where the name came from) of a details file: a `details_<org>__<model>` folder (the
    leaderboard's details sets, as downloaded), else lighteval's own layout
    `details/<model name>/<date>/details_<task>_<date>.parquet`."""
    for folder in [path.parent, *path.parent.parents]:
        if folder.name.startswith("details_") and not _DETAILS.match(folder.name + ".parquet"):
            return folder.name[len("details_"):].replace("__", "/"), f"the details set {folder.name!r}"
        if folder == src.parent:
            break
    parts = path.relative_to(src).parts if path.is_relative_to(src) else path.parts
    if "details" in parts[:-2]:
        start = len(parts) - 1 - parts[::-1].index("details")
        name = "/".join(parts[start + 1:-2])  # between details/ and the <date>/ folder
        if name:
            return name, f"the folder details/{name}"
    return None


def _metrics_dict(value) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):  # lighteval casts nested columns to str when Arrow cannot type them
        import ast
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


LIGHTEVAL_METRICS = ("acc", "acc_norm", "em", "exact_match", "quasi_em", "mc2", "pass@1")


def read_lighteval(src: str | Path, opts: HarnessOptions | None = None, progress: bool = True,
                   col: Collector | None = None) -> Collector:
    """lighteval's details: one Parquet file a task and run (`details_<task>_<date>.parquet`, task
    as `suite|name|fewshot`), a record per example with `example` (the query without few-shot
    examples), `full_prompt` and `metrics` ({name: value}). Into `col` when given."""
    import hashlib
    src, opts, col = Path(src), opts or HarnessOptions(), col or Collector()
    files = sorted((p for p in src.rglob("details_*.parquet") if _DETAILS.match(p.name)),
                   key=lambda p: (_DETAILS.match(p.name)["date"], str(p)))
    if not files:
        raise DataError("no lighteval details files (details_<task>_<date>.parquet) under this folder", file=str(src))
    for path in tqdm(files, desc="importing lighteval details", unit="file", disable=not progress):
        col.files += 1
        if is_lfs_pointer(path):
            col.skip(LFS_FIX, file=str(path))
            continue
        owner = _lighteval_model(path, src)
        if owner is None:
            col.skip("which model ran it is unknown: it is neither in a details_<org>__<model> folder nor in "
                     "lighteval's details/<model>/<date>/ layout", file=str(path))
            continue
        model, source = owner
        col.name_sources.setdefault(model, source)
        task = _DETAILS.match(path.name)["task"]
        benchmark = task.split("|")[1] if task.count("|") >= 2 else task
        try:
            records = list(_records(path))
        except (OSError, ValueError) as e:
            col.skip(f"unreadable ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(path))
            continue
        for n, rec, _ in records:
            metrics = _metrics_dict(rec.get("metrics"))
            chosen = opts.metrics.get(task) or opts.metrics.get(benchmark) or \
                next((m for m in LIGHTEVAL_METRICS if metrics and m in metrics), None)
            if not metrics or chosen not in metrics:
                col.skip(f"no label metric (tried {chosen or list(LIGHTEVAL_METRICS)}; choose one with --metric "
                         f"{benchmark}=NAME)", **_where(path, n), column="metrics",
                         value=sorted(metrics)[:8] if metrics else rec.get("metrics"))
                continue
            try:
                label = _label(metrics[chosen], _where(path, n), f"metrics.{chosen}")
            except DataError as e:
                col.skipped.append(str(e))
                continue
            text = str(rec.get("example") or "").strip() or str(rec.get("full_prompt") or "").split("\n\n")[-1].strip()
            if not text:
                col.skip("no question text", **_where(path, n), column="example")
                continue
            hashes = rec.get("hashes") if isinstance(rec.get("hashes"), dict) else {}
            ident = hashes.get("example") or hashlib.sha256(text.encode()).hexdigest()[:16]
            col.add(model, col.question(f"{benchmark}/{ident}", benchmark, text), label)
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


DUPLICATE_RULE = ("the same model and question read twice (a re-run) keeps the label of the later run, by the "
                  "run's datetime, else the file read later; different models are never merged unless a name "
                  "mapping says so")


def _leaderboard(src: Path, opts: HarnessOptions | None, progress: bool) -> Collector:
    """The Open LLM Leaderboard's details: v2 (harness samples in `<org>__<model>` folders) and v1
    (lighteval's parquet in `details_<org>__<model>` sets), whichever are under `src`."""
    v2 = bool(harness_files(src))
    v1 = any(_DETAILS.match(p.name) for p in src.rglob("details_*.parquet"))
    if not (v1 or v2):
        raise DataError("no Open LLM Leaderboard details under this folder (v2: samples_<task>_<date>.jsonl or "
                        ".parquet in <org>__<model> folders; v1: details_<task>_<date>.parquet in "
                        "details_<org>__<model> sets)", file=str(src))
    col = read_harness(src, opts, progress) if v2 else Collector()
    return read_lighteval(src, opts, progress, col) if v1 else col


def import_results(fmt: str, src: str | Path, *, harness: HarnessOptions | None = None, metric: str | None = None,
                   texts: str | Path | None = None, mapping: dict[str, str] | None = None,
                   texts_from_ids: bool | None = None, progress: bool = True) -> tuple[ResponseData, dict]:
    """(the dataset, a report: files, skipped items (each with where and why), per model the labels
    read and kept and where its name came from, the duplicate rule, near-duplicate model names)."""
    src = Path(src)
    if fmt == "harness":
        col = read_harness(src, harness, progress)
    elif fmt == "lighteval":
        col = read_lighteval(src, harness, progress)
    elif fmt == "leaderboard":
        col = _leaderboard(src, harness, progress)
    elif fmt == "helm":
        col = read_helm(src, metric, progress)
    elif fmt == "pyirt":
        col = read_pyirt(src, texts, progress, texts_from_ids)
    else:
        raise DataError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    lfs = sum(LFS_FIX in s for s in col.skipped)
    if lfs and lfs == col.files:
        raise DataError(f"all {lfs} file(s) are Git LFS pointers, not the data: run `git lfs pull` in the "
                        f"repository they came from", file=str(src))
    data, per_model = col.to_data(src.resolve().name, mapping)
    report = {"format": fmt, "source": str(src), "files": col.files, "models": data.n_models,
              "questions": data.n_questions, "responses": data.n_responses, "skipped": col.skipped,
              "lfs_pointers": lfs, "notes": col.notes, "duplicates_rule": DUPLICATE_RULE,
              "duplicates_dropped": sum(m["duplicates_dropped"] for m in per_model.values()),
              "per_model": per_model, "near_duplicate_model_names": near_duplicate_names(data.models.tolist())}
    return data, report


def detect_format(path: Path) -> str | None:
    """'leaderboard' (harness samples, lighteval details, or both) or 'helm' when a folder holds
    such results (for `--data`), else None."""
    if next((p for p in path.rglob("samples_*") if _SAMPLES.match(p.name)), None) is not None or \
            next((p for p in path.rglob("details_*.parquet") if _DETAILS.match(p.name)), None) is not None:
        return "leaderboard"
    if next(path.rglob("per_instance_stats.json"), None) is not None:
        return "helm"
    return None
