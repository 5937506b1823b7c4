"""An LLM judge as a grader: a sampled share of the logged answers, each shown with its question
to an LLM at any OpenAI-compatible endpoint (`api/endpoint.py`) with a rubric, its verdict
recorded as feedback with source `judge`.

The rubric (`RUBRIC`, or your own) asks for a last line `SCORE: N`, N a whole number from 0 to
10; the grade is N / 10. A verdict without exactly one such score is counted as unparseable and
recorded nowhere, never guessed; a question the endpoint failed is counted as failed. The sample
is fixed by the decision's id (the same decisions at any rerun), decisions the judge graded
before are not asked again, and the judge's own tokens and cost (with its prices) are counted.
"""

from __future__ import annotations

import re

from ..feedback.graders import COLUMNS, logged_propensity, read_log
from ..feedback.log import in_share as sampled
from ..feedback.store import Conflict, FeedbackStore, Grade
from .endpoint import Endpoint

RUBRIC = (
    "You are grading an AI assistant's answer to a user's question. Judge whether the answer is correct and "
    "answers the question as asked; ignore style and length. Reply with at most three sentences of reasons, then "
    "a last line of exactly this form: SCORE: N, where N is a whole number from 0 (wrong or no answer) to 10 "
    "(correct and complete).")
SCORE = re.compile(r"^\s*\**\s*SCORE\s*:\s*\**\s*(\d{1,2})\s*(?:/\s*10)?\s*\**\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)


def judge_prompt(question: str, answer: str, rubric: str = RUBRIC) -> str:
    return f"{rubric}\n\n[QUESTION]\n{question}\n\n[ANSWER]\n{answer}"


def parse_verdict(text: str | None) -> float | None:
    """The grade in [0, 1] that a verdict's one `SCORE: N` line gives; None without exactly one,
    or with N above 10."""
    found = SCORE.findall(text or "")
    if len(found) != 1 or int(found[0]) > 10:
        return None
    return int(found[0]) / 10


def judge_log(endpoint: Endpoint, store: FeedbackStore, root: str | None = None, share: float = 0.1,
              rubric: str = RUBRIC, since_days: float | None = None,
              price_usd_per_mtok: tuple[float, float] | None = None, progress: bool = True) -> dict:
    """Judge the sampled share of the log's answered decisions (texts kept). The counts: judged
    (asked), recorded, unparseable, failed, judged_before, not_sampled, no_text, and the judge's
    prompt_tokens, completion_tokens and usd (None without prices), and `failures`: the commonest
    reasons calls failed, counted."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be above 0 and at most 1, not {share!r}")
    counts = dict.fromkeys(("judged", "recorded", "unparseable", "failed", "judged_before", "not_sampled", "no_text",
                            "conflict", "prompt_tokens", "completion_tokens"), 0)
    rows = {}
    for r in read_log(root, since_days, COLUMNS).to_pylist():
        if r["answered_by"] is None or r["status"] != 200 or r["query"] is None or r["answer"] is None:
            counts["no_text"] += 1
        elif not sampled(r["id"], share):
            counts["not_sampled"] += 1
        else:
            rows[f"{r['id']}:{r['query_index'] or 0}"] = r
    before = store.graded(list(rows), "judge")
    counts["judged_before"] = len(before)
    asking = {k: judge_prompt(r["query"], r["answer"], rubric) for k, r in rows.items() if k not in before}
    why: dict[str, int] = {}
    from tqdm import tqdm
    bar = tqdm(total=len(asking), desc="judging", unit="answer", disable=None if progress else True, leave=False)
    for asked in endpoint.ask(asking, on_answer=lambda _: bar.update()):
        counts["judged"] += 1
        counts["prompt_tokens"] += asked.prompt_tokens or 0
        counts["completion_tokens"] += asked.completion_tokens or 0
        if asked.output is None:
            counts["failed"] += 1
            why[asked.error or "no answer"] = why.get(asked.error or "no answer", 0) + 1
            continue
        score = parse_verdict(asked.output)
        if score is None:
            counts["unparseable"] += 1
            continue
        r = rows[asked.question_id]
        try:
            store.add(Grade(r["id"], score, "judge", r["query_index"] or 0, llm=r["answered_by"], space=r["space"],
                            encoder=r["encoder"], embedding=r["embedding"], comment=f"judge {endpoint.model}",
                            propensity=logged_propensity(r)))
            counts["recorded"] += 1
        except Conflict:
            counts["conflict"] += 1
    bar.close()
    counts["failures"] = dict(sorted(why.items(), key=lambda kv: -kv[1])[:5])  # the commonest reasons, counted
    counts["usd"] = None if price_usd_per_mtok is None else (
        counts["prompt_tokens"] * price_usd_per_mtok[0] + counts["completion_tokens"] * price_usd_per_mtok[1]) / 1e6
    return counts
