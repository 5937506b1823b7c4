"""Onboarding a new LLM from its own endpoint: ask it the space's questions, grade, fit, register.

    import jeirt_ray as jr
    report = jr.onboard_endpoint("http://127.0.0.1:8001/v1", "my-llm", answer_key="answers.csv",
                                 space="models:/demo@champion", max_answers=50)

Rounds of `batch` questions (default 10): the next questions are planned from the
answers graded so far (model/adaptive.py; or in a seeded random order), asked (api/endpoint.py),
graded with the answer key (data/answer_key.py) and written to the answer log as they arrive, until
`max_answers` answers are graded, or the vector's part of the predicted accuracy's interval (what
more answers narrow) is narrower than `target_width` (0.04 unless given; 0: never stop early). Then the LLM's vector is fitted, and only then is a new version registered: a run
that stops early (the endpoint fails too often, Ctrl-C) registers nothing and resumes from its log.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..core import paths
from ..core.secrets import redact
from ..data.answer_key import AnswerKey
from ..core.renamed import deprecated, take
from ..model.adaptive import plan, strategy_for
from ..model.onboarding_defaults import (DEFAULT_BATCH, DEFAULT_MAX_ANSWERS, DEFAULT_PURPOSE, DEFAULT_TARGET_WIDTH,
                                         check_strategy)
from ..model.onboarding import onboard
from ..routing.prices import CHARS_PER_TOKEN, price_pair, question_costs_of, record_onboarded
from ..tracking.registry import SpaceRegistry
from .endpoint import AnswerLog, Endpoint, EndpointError, check_base_url, prompt_for
from .space import Space

log = logging.getLogger("jeirt.onboard")


class OnboardingStopped(RuntimeError):
    """The run stopped before max_answers (too many failed questions); its answers are in the log."""


def check_onboarding(max_answers: int, strategy: str | None, target_width: float, batch: int, max_usd: float | None,
                     price_usd_per_mtok: tuple[float, float] | None, purpose: str = DEFAULT_PURPOSE) -> str:
    """The settings every door shares (CLI, Python, HTTP), checked before anything is asked;
    returns the strategy to use (`strategy`, else the one `purpose` picks)."""
    if isinstance(max_answers, bool) or not isinstance(max_answers, int) or max_answers < 1:
        raise ValueError(f"max_answers must be a whole number >= 1, not {max_answers!r}")
    strategy = check_strategy(strategy, purpose)
    if not (isinstance(target_width, (int, float)) and 0 <= target_width <= 1):
        raise ValueError(f"target_width must be a number from 0 (never stop early) to 1, not {target_width!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number >= 1, not {batch!r}")
    if max_usd is not None and not (isinstance(max_usd, (int, float)) and max_usd >= 0):
        raise ValueError(f"max_usd must be a number >= 0, not {max_usd!r}")
    if max_usd is not None and price_usd_per_mtok is None:
        raise ValueError("a cap in USD (max_usd) needs the new LLM's prices (--price-in and --price-out, or --prices)")
    return strategy


def default_log(model: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    return paths.home() / "onboarding" / f"{safe}.jsonl"


def onboard_endpoint(url: str, model: str, *, answer_key: str | Path | AnswerKey, space: str = "models:/demo@champion",
                     max_answers: int | None = None, purpose: str = DEFAULT_PURPOSE, strategy: str | None = None,
                     api_key: str | None = None,
                     api_key_env: str | None = None, upstream_model: str | None = None, answer_kind: str = "letter",
                     benchmarks: list[str] | None = None, target_width: float = DEFAULT_TARGET_WIDTH,
                     batch: int = DEFAULT_BATCH,
                     concurrency: int = 8, timeout_s: float = 120.0, retries: int = 4, backoff_s: float = 1.0,
                     max_tokens: int = 2048,
                     answer_log: str | Path | None = None, max_failures: int | None = None,
                     price_usd_per_mtok: tuple[float, float] | None = None, max_usd: float | None = None,
                     register: bool = True,
                     promote: bool = False, replace: bool = False, tracking_uri: str | None = None,
                     seed: int = 0, progress: bool = True, budget: int | None = None, adaptive: bool | None = None,
                     budget_usd: float | None = None) -> dict:
    """Onboard LLM `model` from the endpoint at `url` (module docstring) and return the report:
    what was asked, graded and failed, the predicted accuracy per benchmark with 90% intervals,
    what the questions cost and the registered version. `space`: `models:/<name>@<alias>` or
    `models:/<name>/<version>` (the new version is registered under <name>), or a saved folder
    (nothing is registered; the report's `space` holds the new Space). The key is read from
    `api_key`, else the variable `api_key_env`; `upstream_model`: the name the endpoint expects
    (default: `model`). `max_failures`: failed questions (after retries) that stop the run
    (default: a fifth of `max_answers`, at least 5). `purpose`: what the answers are for,
    "route", "estimate" (the accuracy) or "both"; it picks how the questions are chosen, unless
    `strategy` names one ("adaptive": those that tell most; "random", "stratified": a seeded
    random order, by benchmark; "weighted": random, more often where the known LLMs are unsure;
    "mixed": some of each; model/onboarding_defaults.py). With
    `price_usd_per_mtok` (the new LLM's input and output prices),
    questions are chosen per dollar of their estimated cost, and `max_usd` caps that estimate over
    the run. `budget`, `adaptive` and `budget_usd` are the old names of `max_answers`, `strategy`
    and `max_usd`."""
    started = time.perf_counter()
    where = "onboard_endpoint"
    max_answers = take(max_answers, budget, "budget", "max_answers", where, default=DEFAULT_MAX_ANSWERS)
    max_usd = take(max_usd, budget_usd, "budget_usd", "max_usd", where)
    if adaptive is not None:
        deprecated("adaptive", "strategy", where)
        strategy = "adaptive" if adaptive else "random"
    check_base_url(url)
    price_usd_per_mtok = price_pair(price_usd_per_mtok)
    requested = strategy
    strategy = check_onboarding(max_answers, strategy, target_width, batch, max_usd, price_usd_per_mtok, purpose)
    key = answer_key if isinstance(answer_key, AnswerKey) else AnswerKey.read(answer_key, answer_kind)
    if api_key is None and api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise ValueError(f"the variable {api_key_env} named by --api-key-env is not set")
    registry = SpaceRegistry(tracking_uri) if str(space).startswith("models:/") else None
    current = Space.load(space, tracking_uri=tracking_uri)
    strategy = strategy_for(current, requested, purpose)
    if model in current.model_names and not replace:
        raise ValueError(f"the space already has an LLM named {model!r}: pass --replace to refit it, or another --model")
    if not current.question_texts or current.question_embeddings is None:
        raise ValueError("this space stores no question texts and embeddings: retrain it with this version of jeirt")
    texts = dict(zip(current.question_ids, current.question_texts))
    costs = question_costs_of(current, price_usd_per_mtok)
    gradable = set(current.question_ids) & set(key.answers)
    if not gradable:
        raise ValueError(f"none of the space's {len(texts)} questions is in the answer key {key.source}: "
                         f"is it the key of the data the space was trained on?")
    key.check_options(texts)
    unasked = len(texts) - len(gradable)  # the space's questions the key cannot grade
    unknown = len(key) - len(gradable)  # the key's questions the space does not have
    if unasked or unknown:
        log.warning("answer key %s: %d of the space's %d questions are not in it (not asked); %d of its %d "
                    "questions are not in the space (ignored)", key.source, unasked, len(texts), unknown, len(key))
    endpoint = Endpoint(url, upstream_model or model, api_key, concurrency=concurrency, timeout_s=timeout_s,
                        retries=retries, max_tokens=max_tokens, backoff_s=backoff_s)
    answers = AnswerLog(answer_log or default_log(model))
    resumed = [q for q in answers.answered if q in gradable]
    graded = {q: key.grade(q, answers.answered[q].output) for q in resumed[:max_answers]}
    failed: Counter = Counter()
    failed_ids: set[str] = set()
    limit = max_failures if max_failures is not None else max(5, max_answers // 5)
    stop_reason = "max_answers"
    bar = _bar(max_answers, len(graded), model, progress)
    try:
        while len(graded) < max_answers:
            allowed = gradable - set(graded) - failed_ids
            spent = sum(costs[q] for q in set(graded) | failed_ids) if costs is not None else 0.0
            step = plan(current, model, {q: g.label for q, g in graded.items()}, min(batch, max_answers - len(graded)),
                        strategy=strategy, benchmarks=benchmarks, target_width=target_width, allowed=allowed,
                        costs=costs, max_usd=None if max_usd is None else max_usd - spent, seed=seed + len(graded),
                        order_seed=seed)
            if step.stop and graded:
                stop_reason = "interval"  # the predicted accuracy is known closely enough
                break
            ask = [q["question_id"] for q in step.questions]
            if not ask:
                stop_reason = "max_usd" if max_usd is not None else "no question left"
                break
            prompts = {q: prompt_for(key.answers[q][1], texts[q]) for q in ask}

            def arrived(rec):
                answers.write(rec)
                if rec.output is not None:
                    graded[rec.question_id] = key.grade(rec.question_id, rec.output)
                    bar.update(1)
                else:
                    failed[rec.error] += 1
                    failed_ids.add(rec.question_id)

            endpoint.ask(prompts, arrived)
            if sum(failed.values()) >= limit:
                raise OnboardingStopped(
                    f"{sum(failed.values())} questions failed after {retries} retries each "
                    f"({', '.join(f'{n} {why}' for why, n in failed.most_common())}); {len(graded)} of {max_answers} "
                    f"answers graded and saved in {answers.path}: nothing was registered; run the same command "
                    f"again to resume")
    except EndpointError as e:
        raise EndpointError(f"{e}; {len(graded)} answers graded so far, saved in {answers.path}: nothing was "
                            f"registered") from None
    except KeyboardInterrupt:
        raise OnboardingStopped(f"interrupted: {len(graded)} of {max_answers} answers graded and saved in {answers.path}; "
                                f"nothing was registered; run the same command again to resume") from None
    finally:
        bar.close()
    if not graded:
        raise OnboardingStopped(f"no answer could be graded; see {answers.path}")

    ids = list(graded)
    labels = np.array([graded[q].label for q in ids])
    pos = {q: i for i, q in enumerate(current.question_ids)}
    fitted = onboard(current, model, current.question_embeddings[[pos[q] for q in ids]], labels, holdout=0,
                     seed=seed)
    new = Space.from_core(fitted.space)
    record_onboarded(new, model, price_usd_per_mtok, _answer_tokens(answers, ids, current))
    summary = plan(new, model, {q: float(graded[q].label) for q in ids}, 0, benchmarks=benchmarks, strategy=strategy,
                   allowed=gradable - failed_ids, seed=seed, order_seed=seed)
    tokens_in = sum(answers.answered[q].prompt_tokens or len(texts[q]) / 4 for q in ids)
    tokens_out = sum(answers.answered[q].completion_tokens or len(answers.answered[q].output) / 4 for q in ids)
    report = {
        "model": model, "endpoint": redact(url), "space": str(space), "purpose": purpose, "strategy": strategy,
        "graded": len(ids), "correct": int(labels.sum()), "no_answer": sum(g.extracted is None for g in graded.values()),
        "resumed": min(len(resumed), max_answers), "failed": dict(failed), "stop_reason": stop_reason,
        "estimated_cost_usd": None if costs is None else float(sum(costs[q] for q in ids)),
        "predicted": summary.predicted, "interval_width": summary.interval_width,
        "tokens": {"input": int(tokens_in), "output": int(tokens_out)},
        "cost_usd": None if price_usd_per_mtok is None else
        (tokens_in * price_usd_per_mtok[0] + tokens_out * price_usd_per_mtok[1]) / 1e6,
        "answer_log": str(answers.path), "version": None,
        "answer_key": {"questions": len(key), "not_in_space": unknown, "space_questions_not_in_key": unasked}}
    new.metadata.setdefault("onboarded", {})[model] = {
        **new.metadata.get("onboarded", {}).get(model, {}), "from_endpoint": True, "strategy": report["strategy"],
        "graded": len(ids), "predicted_accuracy": summary.predicted["overall"]["accuracy"]}
    if registry is not None and register:
        name = registry.resolve(str(space)).name
        version = registry.register(new, name, {"onboard.graded": len(ids),
                                                "onboard.predicted_accuracy": summary.predicted["overall"]["accuracy"]})
        if promote:
            registry.promote(name, version, str(space).split("@", 1)[1] if "@" in str(space) else "champion")
        report["version"], report["registered_as"] = version, name
    report["wall_seconds"] = time.perf_counter() - started
    report["new_space"] = new
    return report


def _answer_tokens(answers: AnswerLog, ids: list[str], space) -> dict[str, float]:
    """The new LLM's mean answer tokens per benchmark over its graded answers (the endpoint's
    count, else characters / 4), for the router's cost estimates."""
    bench = dict(zip(space.question_ids, space.question_benchmarks)) if space.question_benchmarks else {}
    per: dict[str, list[float]] = {}
    for q in ids:
        rec = answers.answered[q]
        per.setdefault(bench.get(q, ""), []).append(rec.completion_tokens or max(1.0, len(rec.output) / CHARS_PER_TOKEN))
    return {b: float(np.mean(v)) for b, v in per.items() if b}


def _bar(total: int, done: int, model: str, progress: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=done, desc=f"asking {model}", unit="answer", disable=not progress, leave=False)
