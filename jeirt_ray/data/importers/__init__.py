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

from pathlib import Path

from ..dataset import ResponseData
from ..errors import DataError
from .collector import LFS_FIX, Collector
from .harness import SAMPLES_FILE, HarnessOptions, harness_files, read_harness
from .helm import read_helm
from .lighteval import DETAILS_FILE, read_lighteval
from .names import DUPLICATE_RULE, near_duplicate_names, read_mapping
from .pyirt import read_pyirt

__all__ = ["FORMATS", "HarnessOptions", "detect_format", "import_results", "near_duplicate_names", "read_mapping"]

FORMATS = ("harness", "leaderboard", "lighteval", "helm", "pyirt")


def _leaderboard(src: Path, opts: HarnessOptions | None, progress: bool) -> Collector:
    """The Open LLM Leaderboard's details: v2 (harness samples in `<org>__<model>` folders) and v1
    (lighteval's parquet in `details_<org>__<model>` sets), whichever are under `src`."""
    v2 = bool(harness_files(src))
    v1 = any(DETAILS_FILE.match(p.name) for p in src.rglob("details_*.parquet"))
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
    if not src.exists():
        raise DataError(f"{src}: no such file or folder: give the folder (or file) of {fmt} results to import")
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
    if next((p for p in path.rglob("samples_*") if SAMPLES_FILE.match(p.name)), None) is not None or \
            next((p for p in path.rglob("details_*.parquet") if DETAILS_FILE.match(p.name)), None) is not None:
        return "leaderboard"
    if next(path.rglob("per_instance_stats.json"), None) is not None:
        return "helm"
    return None
