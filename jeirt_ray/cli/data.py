"""`jeirt data ...` and `jeirt registry ...`: the CLI's data and registry commands."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .output import console, expected_failures

data_app = typer.Typer(help="Import, generate and check response data.", no_args_is_help=True)
registry_app = typer.Typer(help="The MLflow registry of trained spaces (MLFLOW_TRACKING_URI, default sqlite under "
                                "$JEIRT_HOME).", no_args_is_help=True)


@data_app.command("check")
def data_check(data: Path = typer.Argument(..., help="dataset folder")):
    """Validate a dataset and describe it."""
    from ..api import jobs as pipeline
    with expected_failures():
        console.print(pipeline.load_data(data).describe())


def _pairs(values: list[str], option: str) -> dict[str, str]:
    bad = [v for v in values if "=" not in v]
    if bad:
        console.print(f"[red]bad option {option} {bad[0]!r}:[/red] expected TASK=NAME")
        raise typer.Exit(2)
    return dict(v.split("=", 1) for v in values)


@data_app.command("import")
def data_import(fmt: str = typer.Argument(..., metavar="FORMAT", help="harness (lm-evaluation-harness samples, "
                                          "JSONL or Parquet), leaderboard (Open LLM Leaderboard details, v1 and v2), "
                                          "lighteval (details parquet), helm (HELM run folders) or pyirt (py-irt "
                                          "JSONL)"),
                src: Path = typer.Argument(..., help="a folder (or, for pyirt, a .jsonl file)"),
                out: Path = typer.Option(..., help="folder for questions.parquet, responses.parquet and "
                                                    "import_report.json"),
                metric: list[str] = typer.Option([], help="harness: TASK=METRIC, a task's label (repeatable; default: "
                                                          "the first of acc, exact_match, pass@1, ...); helm: METRIC"),
                filter_: list[str] = typer.Option([], "--filter", help="harness: TASK=FILTER (default none, else "
                                                                       "strict-match, else the first by name)"),
                text_field: Optional[str] = typer.Option(None, help="harness: a field of `doc` as the question text "
                                                                    "(default: the prompt without few-shot examples)"),
                texts: Optional[Path] = typer.Option(None, help="pyirt: question texts (question_id, text[, benchmark]; "
                                                                "CSV or Parquet)"),
                texts_from_ids: Optional[bool] = typer.Option(None, "--texts-from-ids/--ids-are-not-texts",
                                                              help="pyirt: the item ids are the question texts "
                                                                   "(py-irt's amortized input; default: detected)"),
                names: Optional[Path] = typer.Option(None, help="model-name mapping (YAML {name: canonical} or "
                                                                "CSV name,canonical)")):
    """Import per-question results from lm-evaluation-harness, HELM or py-irt into the long format."""
    from ..api import jobs as pipeline
    metrics = _pairs(metric, "--metric") if fmt in ("harness", "leaderboard", "lighteval") else \
        (metric[0] if metric else None)
    with expected_failures():
        data, report = pipeline.import_results(fmt, src, metrics=metrics, filters=_pairs(filter_, "--filter"),
                                               text_field=text_field, texts=texts, texts_from_ids=texts_from_ids,
                                               names=names, out=out)
    def say(line: str) -> None:  # soft_wrap: a path is never broken across lines, so that it stays copyable
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    say(f"wrote it to {out}")
    for note in report["notes"]:
        say(f"note: {note}")
    if report["duplicates_dropped"]:
        say(f"{report['duplicates_dropped']} duplicate label(s) dropped: {report['duplicates_rule']}")
    for model, row in list(report["per_model"].items())[:20]:
        merged = f" (merged: {', '.join(row['names'])})" if len(row["names"]) > 1 else ""
        say(f"  {model}: {row['labels_kept']} labels kept of {row['labels_read']} read; name from "
            f"{'; '.join(row['name_from'])}{merged}")
    if len(report["per_model"]) > 20:
        say(f"  ... and {len(report['per_model']) - 20} more models (all in {out / 'import_report.json'})")
    if report["skipped"]:
        console.print(f"[yellow]skipped {len(report['skipped'])} item(s)[/yellow] (all in {out / 'import_report.json'}):",
                      soft_wrap=True)
        for line in report["skipped"][:10]:
            say(f"  {line}")
    if report["near_duplicate_model_names"]:
        groups = report["near_duplicate_model_names"]
        console.print(f"[yellow]{len(groups)} group(s) of model names that may be one LLM[/yellow] (merge them with "
                      f"--names FILE): " + "; ".join(" = ".join(g) for g in groups[:5]), highlight=False, soft_wrap=True)


@data_app.command("synth")
def data_synth(out: Path = typer.Option(..., help="folder to write questions/responses Parquet to"),
               models: int = 24, questions: int = 1200, seed: int = 0):
    """Write the SYNTHETIC dataset (known JE-IRT geometry) in the long format."""
    from ..data.synthetic import generate
    d = generate(n_models=models, n_questions=questions, seed=seed)
    d.save(out)
    console.print(f"wrote {d.describe()} to {out}")


@data_app.command("fetch")
def data_fetch(dataset: str = typer.Argument(..., help="only 'embedllm' for now"),
               out: Optional[Path] = typer.Option(None, help="default: $JEIRT_HOME/data/embedllm")):
    """Download a public dataset (needs network access to the Hugging Face hub)."""
    from ..core import paths
    from ..data import fetch_embedllm
    if dataset != "embedllm":
        console.print(f"[red]unknown dataset {dataset!r}[/red]; available: embedllm")
        raise typer.Exit(2)
    try:
        target = fetch_embedllm(out or paths.home() / "data" / "embedllm")
    except RuntimeError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
    console.print(f"downloaded to {target}; use it with --data {target}")


@registry_app.command("list")
def registry_list(name: str = typer.Argument(..., help="registered model name")):
    """Versions of a registered space, with aliases and metrics."""
    from ..api.space import Registry
    reg = Registry()
    with expected_failures():
        rows = reg.list(name)
    from ..core.secrets import redact
    table = Table(title=f"{name} in {redact(str(reg.tracking_uri))}")
    for col in ("version", "aliases", "metrics", "data"):
        table.add_column(col)
    for row in rows:
        metrics = ", ".join(f"{k[7:]}={v}" for k, v in row["tags"].items() if k.startswith("metric."))
        table.add_row(str(row["version"]), ", ".join(row["aliases"]), metrics, row["tags"].get("data_fingerprint", ""))
    console.print(table)


@registry_app.command("promote")
def registry_promote(name: str, version: int, alias: str = typer.Option("champion")):
    """Point an alias (default @champion) at a version."""
    from ..api.space import Registry
    with expected_failures():
        Registry().promote(name, version, alias)
    console.print(f"models:/{name}@{alias} -> version {version}")
