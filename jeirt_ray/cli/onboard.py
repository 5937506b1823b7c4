"""`jeirt onboard`: a new LLM from its own endpoint, and `jeirt onboard plan`: which questions to
ask it next, for users who grade with their own harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..model.onboarding_defaults import (DEFAULT_BATCH, DEFAULT_MAX_ANSWERS, DEFAULT_PURPOSE, DEFAULT_TARGET_WIDTH,
                                         check_strategy)
from .output import console, expected_failures

onboard_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                          help="Onboard a new LLM from its OpenAI-compatible endpoint (or plan its questions).")

SpaceOpt = typer.Option("models:/demo@champion", "--space", help="the space: models:/<name>@<alias>, "
                        "models:/<name>/<version>, or a saved folder")
BenchOpt = typer.Option(None, "--benchmark", help="ask (and predict) only within this benchmark; repeat for more")
WidthOpt = typer.Option(DEFAULT_TARGET_WIDTH, "--target-width", min=0, max=1, help="stop asking once the vector's "
                        "part of the 90%% interval of the predicted accuracy (what more answers narrow) is narrower "
                        "than this (0: never stop early)")
PurposeOpt = typer.Option(DEFAULT_PURPOSE, "--purpose", help="what the answers are for: route, estimate (its "
                          "accuracy) or both; picks --strategy")
StrategyOpt = typer.Option(None, "--strategy", help="how questions are chosen (default: the --purpose's): adaptive "
                           "(those that tell most about the LLM), random or stratified (a seeded random order, "
                           "stratified by benchmark), weighted (random, more often where the known LLMs are unsure), "
                           "mixed (some of each), anchored (the space's anchor questions, chosen on its known LLMs' "
                           "answers: the default for estimating where it keeps hundreds)")
OldStrategyOpt = typer.Option(None, "--adaptive/--random", hidden=True, help="old spelling of --strategy")
PriceInOpt = typer.Option(None, min=0, help="the new LLM's USD per million input tokens (with --price-out)")
PriceOutOpt = typer.Option(None, min=0, help="its USD per million output tokens (with --price-in)")
MaxUsdOpt = typer.Option(None, "--max-usd", min=0, help="with the new LLM's prices: spend at most this on questions "
                         "(their cost estimated before asking)")
OldMaxUsdOpt = typer.Option(None, "--budget-usd", min=0, hidden=True, help="old spelling of --max-usd")


def _strategy(strategy: Optional[str], adaptive: Optional[bool], purpose: str) -> Optional[str]:
    """The strategy asked for (None: the purpose's, which the space settles), checked."""
    if adaptive is not None:
        _renamed("--adaptive/--random", "--strategy adaptive|random")
        return "adaptive" if adaptive else "random"
    check_strategy(strategy, purpose)
    return strategy


def _renamed(old: str, new: str) -> None:
    console.print(f"[yellow]{old} is now {new}; the old spelling still works, for now[/yellow]", highlight=False)


def _prices(prices: Optional[Path], price_in: Optional[float], price_out: Optional[float], model: str):
    """(USD per Mtok in, out) for the new LLM: both given, else its row of a price table, else None."""
    if (price_in is None) != (price_out is None):
        raise ValueError("give both --price-in and --price-out (USD per million input and output tokens), or neither")
    if price_in is not None:
        return (price_in, price_out)
    if prices is None:
        return None
    from ..routing.prices import PriceTable
    found = PriceTable.read(prices).lookup(model)
    if found is None:
        console.print(f"[yellow]{model} is not in {prices}: the questions' cost is not reported[/yellow]")
    return found


def _predicted_table(predicted: dict, title: str) -> Table:
    table = Table(title=title)
    for col in ("benchmark", "estimated accuracy", "90% interval", "questions", "answers it rests on"):
        table.add_column(col)
    for name, row in sorted(predicted.items(), key=lambda kv: (kv[0] != "overall", kv[0])):
        learned = f"{row['anchor_answers']} anchors" if row.get("anchor_answers") else \
            f"{row.get('random_answers', 0)} random"
        table.add_row(name, f"{row['accuracy']:.3f}", f"[{row['low']:.3f}, {row['high']:.3f}]", str(row["questions"]),
                      learned)
    return table


@onboard_app.callback()
def onboard_cmd(ctx: typer.Context,
                endpoint: Optional[str] = typer.Option(None, "--endpoint", help="the LLM's OpenAI-compatible API "
                                                       "base URL, e.g. http://127.0.0.1:8001/v1"),
                model: Optional[str] = typer.Option(None, "--model", help="the new LLM's name (also the model name "
                                                    "sent to the endpoint, unless --upstream-model)"),
                answers: Optional[Path] = typer.Option(None, "--answers", help="the answer key: CSV/Parquet with "
                                                       "question_id, answer[, kind] (see docs/guide/onboarding.md)"),
                answer_kind: str = typer.Option("letter", help="kind of the key's rows without one: letter "
                                                "(MMLU-Pro's extraction), letter_strict, number, exact"),
                api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="the environment variable "
                                                          "that holds the endpoint's API key"),
                upstream_model: Optional[str] = typer.Option(None, help="the model name the endpoint expects"),
                space: str = SpaceOpt,
                max_answers: int = typer.Option(DEFAULT_MAX_ANSWERS, "--max-answers", min=1, help="answers to grade "
                                                "at most"),
                old_max_answers: Optional[int] = typer.Option(None, "--budget", min=1, hidden=True,
                                                              help="old spelling of --max-answers"),
                max_usd: Optional[float] = MaxUsdOpt,
                old_max_usd: Optional[float] = OldMaxUsdOpt,
                purpose: str = PurposeOpt,
                strategy: Optional[str] = StrategyOpt,
                adaptive: Optional[bool] = OldStrategyOpt,
                benchmark: Optional[list[str]] = BenchOpt,
                target_width: float = WidthOpt,
                batch: int = typer.Option(DEFAULT_BATCH, min=1, help="questions planned at a time (the vector is "
                                          "refitted between batches)"),
                concurrency: int = typer.Option(8, min=1, help="questions in flight at once"),
                timeout: float = typer.Option(120.0, help="seconds per request"),
                retries: int = typer.Option(4, help="retries of a request that may pass on a second try"),
                max_tokens: int = typer.Option(2048, help="max_tokens of each answer"),
                answer_log: Optional[Path] = typer.Option(None, "--log", help="answers are appended here as they "
                                                          "arrive; a rerun resumes from it (default: "
                                                          "$JEIRT_HOME/onboarding/<model>.jsonl)"),
                prices: Optional[Path] = typer.Option(None, help="a price table with the new LLM's row, for the "
                                                      "questions' cost"),
                price_in: Optional[float] = PriceInOpt,
                price_out: Optional[float] = PriceOutOpt,
                no_register: bool = typer.Option(False, "--no-register", help="do not register the space with "
                                                 "the new LLM as a new version"),
                promote: bool = typer.Option(False, "--promote", help="move the --space alias to the new version"),
                replace: bool = typer.Option(False, "--replace", help="refit an LLM the space already has"),
                from_data: Optional[Path] = typer.Option(None, "--from-data", help="onboard every LLM of this "
                                                         "results folder (questions.*, responses.*, optional "
                                                         "models.csv with params_b) from its answers, on Ray"),
                register_as: Optional[str] = typer.Option(None, "--register", help="with --from-data: the "
                                                          "registered model to add the new version to (default: "
                                                          "the space's own)"),
                as_json: bool = typer.Option(False, "--json", help="print the report as JSON")):
    """Ask a new LLM at its endpoint the questions that tell most about it, grade its answers,
    fit its vector and register the space with it as a new version; or, with --from-data DIR,
    onboard every LLM of a results folder at once."""
    if ctx.invoked_subcommand is not None:
        return
    if from_data is not None:
        if no_register:
            console.print("[red]--from-data registers its one new version; drop --no-register[/red]")
            raise typer.Exit(2)
        _onboard_folder(from_data, space, register_as, promote, replace, as_json)
        return
    if register_as is not None:
        console.print("[red]--register NAME goes with --from-data; an endpoint's LLM is registered under the "
                      "space's own name (--no-register: not at all)[/red]")
        raise typer.Exit(2)
    if not endpoint or not model or answers is None:
        console.print("[red]jeirt onboard needs --endpoint URL --model NAME --answers KEY_FILE "
                      "(or `jeirt onboard plan --help`)[/red]")
        raise typer.Exit(2)
    from ..api.endpoint import EndpointError
    from ..api.onboard_endpoint import OnboardingStopped, onboard_endpoint
    with expected_failures():
        if old_max_answers is not None:
            _renamed("--budget", "--max-answers")
            max_answers = old_max_answers
        if old_max_usd is not None:
            _renamed("--budget-usd", "--max-usd")
            max_usd = old_max_usd
        try:
            report = onboard_endpoint(
                endpoint, model, answer_key=answers, space=space, max_answers=max_answers,
                purpose=purpose, strategy=_strategy(strategy, adaptive, purpose), api_key_env=api_key_env,
                upstream_model=upstream_model,
                answer_kind=answer_kind, benchmarks=benchmark, target_width=target_width, batch=batch,
                concurrency=concurrency, timeout_s=timeout, retries=retries, max_tokens=max_tokens,
                answer_log=answer_log, price_usd_per_mtok=_prices(prices, price_in, price_out, model),
                max_usd=max_usd, register=not no_register, promote=promote, replace=replace)
        except (EndpointError, OnboardingStopped) as e:
            console.print(f"[red]{e}[/red]", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
    report.pop("new_space")
    if as_json:
        print(json.dumps(report, indent=1))
        return
    console.print(_predicted_table(report["predicted"], f"{model}: predicted accuracy"))
    failed = sum(report["failed"].values())
    cost = "" if report["cost_usd"] is None else f"; the questions cost {report['cost_usd']:.4f} USD"
    console.print(f"{report['graded']} answers graded ({report['correct']} right, {report['no_answer']} without an "
                  f"answer to read; {report['resumed']} from the log), {failed} failed, "
                  f"{report['tokens']['input']} + {report['tokens']['output']} tokens{cost}; "
                  f"{report['wall_seconds']:.1f} s")
    coverage = report["answer_key"]
    if coverage["not_in_space"] or coverage["space_questions_not_in_key"]:
        console.print(f"[yellow]answer key {answers}: {coverage['not_in_space']} of its {coverage['questions']} "
                      f"questions are not in the space (ignored); {coverage['space_questions_not_in_key']} of the "
                      f"space's questions are not in the key (never asked)[/yellow]", highlight=False)
    if report["version"] is not None:
        console.print(f"registered as version {report['version']} of {report['registered_as']}")
    up = {"url": report["endpoint"], **({"model": upstream_model} if upstream_model else {}),
          **({"api_key_env": api_key_env} if api_key_env else {})}
    console.print("to route chat to it, add to the Router's user_config.upstreams in your Serve config:\n"
                  f"  {model}: {json.dumps(up)}", highlight=False, soft_wrap=True)


@onboard_app.command("plan")
def plan_cmd(model: str = typer.Option(..., "--model", help="the new LLM's name"),
             space: str = SpaceOpt,
             answered: Optional[Path] = typer.Option(None, "--answered", help="its graded answers so far: "
                                                     "CSV/Parquet with question_id, label (0-1)"),
             k: int = typer.Option(DEFAULT_BATCH, "-k", "--k", min=1, help="how many questions to plan"),
             purpose: str = PurposeOpt,
             strategy: Optional[str] = StrategyOpt,
             adaptive: Optional[bool] = OldStrategyOpt,
             benchmark: Optional[list[str]] = BenchOpt,
             target_width: float = WidthOpt,
             price_in: Optional[float] = PriceInOpt,
             price_out: Optional[float] = PriceOutOpt,
             max_usd: Optional[float] = MaxUsdOpt,
             old_max_usd: Optional[float] = OldMaxUsdOpt,
             out: Optional[Path] = typer.Option(None, "--out", help="also write the planned questions (id, "
                                                "benchmark, text) to this CSV"),
             as_json: bool = typer.Option(False, "--json", help="print the plan as JSON")):
    """The next K questions of the space to ask a new LLM, from its answers so far, and whether to
    stop (its predicted accuracy is known closely enough)."""
    from ..api.space import Space
    from ..data.answer_key import read_graded
    from ..model.adaptive import plan
    from ..routing.prices import question_costs_of
    with expected_failures():
        if old_max_usd is not None:
            _renamed("--budget-usd", "--max-usd")
            max_usd = old_max_usd
        strategy = _strategy(strategy, adaptive, purpose)
        prices = _prices(None, price_in, price_out, model)
        if max_usd is not None and prices is None:
            raise ValueError("--max-usd needs --price-in and --price-out (the new LLM's prices)")
        s = Space.load(space)
        done = read_graded(answered) if answered is not None else {}
        result = plan(s, model, done, k, strategy=strategy, purpose=purpose, benchmarks=benchmark,
                      target_width=target_width, costs=question_costs_of(s, prices), max_usd=max_usd)
    if out is not None:
        import pandas as pd
        texts = dict(zip(s.question_ids, s.question_texts)) if s.question_texts else {}
        pd.DataFrame([{**q, "text": texts.get(q["question_id"], "")} for q in result.questions]).to_csv(out, index=False)
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    console.print(_predicted_table(result.predicted, f"{model}: predicted accuracy from {result.answered} answers"))
    verdict = "stop: more answers would not narrow it much" if result.stop else "ask more"
    console.print(f"interval width {result.interval_width:.3f}, of which the vector's "
                  f"{result.predicted['overall']['vector_width']:.3f} (target {target_width:g}): {verdict}")
    for q in result.questions:
        cost = "" if q["cost_usd"] is None else f"\t{q['cost_usd']:.6f} USD"
        console.print(f"{q['question_id']}\t{q['benchmark']}{cost}")


def _onboard_folder(folder: Path, space: str, register_as: Optional[str], promote: bool, replace: bool,
                    as_json: bool) -> None:
    """`jeirt onboard --from-data DIR`: every LLM of a results folder, on Ray, one new version."""
    from ..distributed import init_ray
    from ..distributed.onboard import onboard_folder
    with expected_failures():
        if not space.startswith("models:/"):
            raise ValueError(f"--from-data needs a registered space (models:/<name>@<alias>), not {space!r}")
        init_ray()
        report = onboard_folder(folder, space, register=register_as, promote=promote, replace=replace,
                                progress=not as_json)
    if as_json:
        print(json.dumps(report, indent=1))
        return
    for row in report["failed"]:
        console.print(f"[yellow]skipped {row['llm']}: {row['reason']}[/yellow]", highlight=False, soft_wrap=True)
    known = [r for r in report["skipped"] if r["reason"].startswith("already")]
    other = [r for r in report["skipped"] if not r["reason"].startswith("already")]
    for row in other:
        console.print(f"[yellow]skipped {row['llm']}: {row['reason']}[/yellow]", highlight=False, soft_wrap=True)
    if known:
        console.print(f"[yellow]{len(known)} LLM(s) of the folder are already in the space, e.g. {known[0]['llm']} "
                      f"(--replace refits them)[/yellow]", highlight=False, soft_wrap=True)
    if report["questions_not_in_space"]:
        console.print(f"[yellow]{report['questions_not_in_space']} of the folder's {report['questions']} questions "
                      f"are not in the space: their answers are not used[/yellow]", highlight=False)
    console.print(f"{report['onboarded']} of {report['llms']} LLMs onboarded ({report['resumed']} from an earlier "
                  f"run's state, {report['state']}) in {report['wall_s']:.1f} s", highlight=False, soft_wrap=True)
    if report["version"] is not None:
        console.print(f"registered as version {report['version']} of {report['registered_as']}"
                      + (f"; {report['promoted']} -> version {report['version']}" if report.get("promoted") else ""))
    else:
        console.print("nothing was registered: no LLM was onboarded")
