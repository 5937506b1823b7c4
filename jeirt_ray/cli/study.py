"""`jeirt evaluate | train | demo | tune | report | analyze | encode`: the studies and the jobs that
make a space (jeirt_ray.api.jobs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..core.secrets import redact
from .output import console, expected_failures, results_table
from .options import (CostsOpt, CriterionOpt, DataOpt, EncoderLrOpt, EncoderOpt, FinetuneOpt, MembersOpt,
                      PartialSplitOpt, SearchOpt, SeedOpt, SplitOpt, TrialsOpt)


def _methods(value: str) -> list[str]:
    return [m.strip() for m in value.split(",") if m.strip()]


def evaluate(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = SeedOpt,
             split: Optional[Path] = SplitOpt, partial_split: bool = PartialSplitOpt,
             methods: str = typer.Option("jeirt,mf,knn,majority,irt1pl,irt2pl", help="comma-separated subset"),
             search: bool = SearchOpt, trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt,
             members: Optional[int] = MembersOpt, finetune: Optional[str] = FinetuneOpt,
             encoder_lr: float = EncoderLrOpt, out: Optional[Path] = typer.Option(None, help="write the results "
                                                                                  "as JSON here (and the split)")):
    """Train every method on one split and compare them on the test questions. With --finetune,
    JE-IRT and MF each fine-tune their own copy of the encoder first."""
    from ..api import jobs as pipeline
    with expected_failures():
        results = pipeline.evaluate(data, methods=_methods(methods), encoder=encoder, search=search, seed=seed,
                                    split=split, partial_split=partial_split, members=members, trials=trials,
                                    criterion=criterion, finetune=finetune, encoder_lr=encoder_lr, out=out)
    synthetic = "truth" in results
    console.print(results_table(results, f"{'SYNTHETIC ' if synthetic else ''}test questions, "
                                         f"{'split ' + str(split) if split else f'split by question, seed {seed}'}"))


def train(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = SeedOpt,
          split: Optional[Path] = SplitOpt, partial_split: bool = PartialSplitOpt, search: bool = SearchOpt,
          trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt, members: Optional[int] = MembersOpt,
          workers: Optional[int] = typer.Option(None, "--workers", help="train on Ray Train with this many workers "
                                                "(0: Train's local mode, in this process); turns --fixed on"),
          gpus: bool = typer.Option(False, "--gpus", help="one GPU per Ray Train worker (nccl)"),
          out: Optional[Path] = typer.Option(None, help="folder to save the space in (default: "
                                                        "$JEIRT_HOME/spaces/<data name>)"),
          register: Optional[str] = typer.Option(None, help="also register the space under this name in MLflow"),
          promote: Optional[str] = typer.Option(None, help="with --register: point this alias at the new version"),
          finetune: Optional[str] = FinetuneOpt, encoder_lr: float = EncoderLrOpt,
          prices: Optional[Path] = typer.Option(None, "--prices", help="a price table (CSV model,input_usd_per_mtok,"
                                                "output_usd_per_mtok; YAML or JSON) stored with the space for "
                                                "its cost policies"),
          held_out_benchmarks: int = typer.Option(6, "--held-out-benchmarks", min=0, help=(
              "choose the routing policy also with up to this many benchmarks held out of training in turn "
              "(one more training each), so that it holds on unseen benchmarks; 0: on validation alone"))):
    """Train a JE-IRT space (searched on Ray Tune by default; --fixed in this process, or on Ray
    Train with --workers N), choose its routing policy on validation and save it."""
    from ..core import paths
    from ..api import jobs as pipeline
    # every argument checked before the first expensive step (training takes minutes to hours)
    if promote and not register:
        raise typer.BadParameter("--promote needs --register NAME (the alias moves on a registered version)")
    if not search and (trials is not None or criterion != "val_loss"):
        raise typer.BadParameter("--trials and --criterion are search settings: drop them, or drop --fixed")
    if out is not None and out.exists() and not out.is_dir():
        raise typer.BadParameter(f"--out {out} is a file: name a folder to save the space in")
    with expected_failures():
        if prices is not None:
            from ..routing.prices import PriceTable
            PriceTable.read(prices)  # a missing or broken table: its one line now, not after training
        d = pipeline.load_data(data)
        space = pipeline.train(d, encoder=encoder, search=search, members=members, workers=workers, gpus=gpus,
                               finetune=finetune, encoder_lr=encoder_lr, split=split, partial_split=partial_split,
                               seed=seed, trials=trials, criterion=criterion, held_out_benchmarks=held_out_benchmarks,
                               prices=prices,
                               mlflow_run=f"train-{register}" if register else None,
                               out=out or paths.home() / "spaces" / d.name)
        if register:
            version = pipeline.register(space, register, alias=promote)
            if not promote:
                console.print(f"promote with: jeirt registry promote {register} {version}")


def demo(out: Optional[Path] = typer.Option(None, help="output folder (default: $JEIRT_HOME/demo)"),
         encoder: str = EncoderOpt, trials: Optional[int] = TrialsOpt,
         name: str = typer.Option("demo", help="the registered model name")):
    """The main job on the embedded SYNTHETIC dataset, on Ray: encode (Ray Data), search JE-IRT's
    and MF's configurations (Ray Tune), register the space as @champion in MLflow, and compare
    every method with the generator's truth. A few minutes on a laptop."""
    from ..api import jobs as pipeline
    from ..tracking.registry import default_tracking_uri
    console.print("[yellow]SYNTHETIC: simulated LLMs drawn from a known JE-IRT geometry, not real results. "
                  "Use --data with `jeirt evaluate` / `jeirt train` for real data.[/yellow]")
    with expected_failures():
        res = pipeline.demo(out, encoder=encoder, trials=trials, name=name)
    console.print(results_table(res["results"], "SYNTHETIC data, split by question (80/10/10), seed 0"))
    console.print(f"`truth` is the generator's own probabilities: no method can beat it. JE-IRT closes "
                  f"{res['closed']:.0%} of the distance from the per-LLM majority to it.\nWrote {res['out']}. Look at "
                  f"the runs: mlflow ui --backend-store-uri {redact(default_tracking_uri())}\nThe registered space: "
                  f"jeirt registry list {name}")


def tune(config: Path = typer.Argument(..., help="a sweep YAML, e.g. tune_configs/smoke.yaml"),
         data: Optional[Path] = typer.Option(None, "--data", help="overrides the YAML's data folder"),
         out: Optional[Path] = typer.Option(None, help="folder for the summary JSON and the plot (default: the "
                                                       "sweep's folder under $JEIRT_HOME/tune)")):
    """Sweep JE-IRT settings on Ray Tune (see tune_configs/ for the YAML grammar); every trial is an
    MLflow run nested under the sweep's, and the best trial's space is registered."""
    from ..core import paths
    from ..api import jobs as pipeline
    from ..distributed import init_ray
    from ..distributed.sweep import SweepConfig, run_sweep
    from ..tracking.registry import default_tracking_uri
    with expected_failures():
        sweep = SweepConfig.from_yaml(config)
        prep = pipeline.prepare(data or sweep.data, encoder=sweep.encoder, seed=sweep.split_seed,
                                finetune=sweep.finetune, encoder_lr=sweep.encoder_lr,
                                kind=sweep.base.get("kind", "jeirt"))
    init_ray()
    summary = run_sweep(sweep, prep, storage=paths.home() / "tune", tracking_uri=default_tracking_uri(), out=out)
    table = Table(title=f"sweep {sweep.name} on {prep.data.name}")
    for col in ("params", "epochs", "val loss", "test acc", "status"):
        table.add_column(col)
    for t in sorted(summary["trials"], key=lambda t: (t["val_loss"] is None, t["val_loss"] or 0)):
        status = "completed" if t["completed"] else ("failed" if t["error"] else "stopped by the scheduler")
        table.add_row(json.dumps(t["params"]), str(t["epochs"]), f"{t['val_loss']:.4f}" if t["val_loss"] else "-",
                      f"{t['test_accuracy']:.4f}" if t["test_accuracy"] else "-", status)
    console.print(table)
    console.print(f"best: {summary['best']['params']} (validation loss {summary['best']['val_loss']:.4f})")
    for key, text in (("registered_version", f"registered as {sweep.register_as} version {{}}"), ("plot", "plot: {}")):
        if key in summary:
            console.print(text.format(summary[key]))
    console.print(f"MLflow: sweep run {summary['parent_run_id']} in {redact(default_tracking_uri())}")


def _report(data, encoder, seed, out, members, costs, studies, prices=None) -> dict:
    from ..api import jobs as pipeline
    with expected_failures():
        return pipeline.report(data, out=out, encoder=encoder, seed=seed, members=members, costs=costs, studies=studies,
                               prices=prices)


def report(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
           out: Path = typer.Option(..., help="folder for report.md, report.html, the PNGs and results.json"),
           members: Optional[int] = MembersOpt, costs: Optional[Path] = CostsOpt,
           prices: Optional[Path] = typer.Option(None, "--prices", help="a price table (USD per million tokens) for "
                                                 "the cost study (the cost-accuracy frontier)"),
           studies: Optional[str] = typer.Option(None, "--studies", help="comma-separated studies to run "
                                                 "(default: all), e.g. --studies routing,probes"),
           skip: list[str] = typer.Option([], hidden=True, help="old name: a study to leave out (repeatable)")):
    """Run the paper's studies on one dataset (routing with costs, onboarding, 2PL failure, norm vs
    difficulty, taxonomy, probes, leave-one-benchmark-out, ranking) and write a report."""
    from ..analysis.report import STUDIES
    chosen = [s.strip() for s in studies.split(",") if s.strip()] if studies else None
    bad = sorted(set(skip) - set(STUDIES)) or sorted(set(chosen or ()) - set(STUDIES))
    if bad:
        raise typer.BadParameter(f"unknown studies {bad}; known: {', '.join(STUDIES)}",
                                 param_hint="--skip" if skip else "--studies")
    if skip:
        chosen = [n for n in (chosen or STUDIES) if n not in skip]
    results = _report(data, encoder, seed, out, members, costs, chosen, prices)
    summary = []
    if "routing" in results:
        acc = results["routing"]["accuracy"]
        summary.append(f"routing: JE-IRT {acc['jeirt_argmax']:.3f}, per-benchmark best {acc['per_benchmark_best']:.3f}, "
                       f"best average {acc['best_average']:.3f}")
    for key, label, field, fmt in (("norm_difficulty", "norm-difficulty Spearman", "spearman", ".3f"),
                                   ("irt_2pl", "2PL negative discriminations", "share_negative", ".1%"),
                                   ("lobo", "alignment-drop Spearman", "spearman_alignment_drop", ".3f")):
        if key in results:
            summary.append(f"{label} {results[key][field]:{fmt}}")
    console.print("; ".join(summary))


def analyze(study: str = typer.Argument(..., help="one of: routing, onboarding, irt_2pl, norm_difficulty, "
                                                   "taxonomy, probes, lobo, ranking, cost"),
            data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
            out: Path = typer.Option(..., help="folder for the study's report.md, PNGs and results.json"),
            members: Optional[int] = MembersOpt, costs: Optional[Path] = CostsOpt,
            prices: Optional[Path] = typer.Option(None, "--prices", help="a price table, for the cost study")):
    """Run one study of the report (see `jeirt report`) and print its figures."""
    from ..analysis.report import STUDIES
    if study not in STUDIES:
        raise typer.BadParameter(f"unknown study {study!r}; known: {', '.join(STUDIES)}", param_hint="STUDY")
    results = _report(data, encoder, seed, out, members, costs, [study], prices)
    console.print_json(json.dumps(results[study], default=float))


def encode(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt,
           replicas: int = typer.Option(0, "--replicas", help="encode on Ray Data with this many encoder replicas "
                                                          "(0: in this process)"),
           ray: Optional[int] = typer.Option(None, "--ray", hidden=True, help="old name of --replicas"),
           gpus_per_replica: float = typer.Option(0.0, help="GPUs per Ray replica (0: CPU replicas)"),
           batch_size: int = typer.Option(64)):
    """Embed every question with the frozen encoder into the on-disk cache."""
    from ..api import jobs as pipeline
    with expected_failures():
        n, where = pipeline.encode(data, encoder=encoder, replicas=replicas if ray is None else ray,
                                   gpus_per_replica=gpus_per_replica, batch_size=batch_size)
    console.print(f"{n} vectors cached for {where}")
