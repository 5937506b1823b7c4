"""Asking an LLM at an OpenAI-compatible endpoint (vLLM, TGI, a hosted API) its questions.

`Endpoint.ask` sends each question as one user message to `<url>/chat/completions` (temperature
0), at most `concurrency` at a time, each with a timeout, retrying what may pass on a second try
(a refused or dropped connection, a timeout, 429 and 5xx, after `Retry-After` when the endpoint
gives one, else with exponential backoff) and stopping the run at once on what will not (401,
403: the key; 404: the URL or the model name). Any other 4xx fails that question only. Every
answer (or final failure) is appended to an `AnswerLog` as it arrives, so an interrupted run
resumes where it stopped. No message carries the key or the URL's credentials.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from ..core.secrets import redact
from ..serving.relay.openai_http import AnswerTooLarge, bearer, chat_url, read_capped, retryable

INSTRUCTIONS = {
    "letter": 'The following is a multiple choice question. Think step by step and then finish your answer '
              'with "the answer is (X)" where X is the correct letter choice.',
    "number": 'Solve the following problem. Think step by step and then finish your answer with '
              '"the answer is N" where N is the final number.',
    "exact": 'Answer the following question. Think step by step and then finish your answer with '
             '"the answer is: " followed by the final answer alone.',
}
INSTRUCTIONS["letter_strict"] = INSTRUCTIONS["letter"]


def prompt_for(kind: str, question: str) -> str:
    """The user message for a question whose answer is graded as `kind` (data.answer_key)."""
    return f"{INSTRUCTIONS[kind]}\n\n{question}"


class EndpointError(RuntimeError):
    """The endpoint refuses every question (a bad key, URL or model name): the run stops."""


@dataclass
class Asked:
    question_id: str
    output: str | None = None  # the answer's text; None when the question failed
    error: str | None = None  # why it failed (kind and status, never a URL or body)
    attempts: int = 0
    seconds: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class AnswerLog:
    """A JSON-lines file of `Asked` records, appended as answers arrive. Read back, the answered
    questions are not asked again; failed ones are."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.answered: dict[str, Asked] = {}
        if self.path.exists():
            for n, line in enumerate(self.path.read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    rec = Asked(**json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    if n == len(self.path.read_text().splitlines()):  # a line cut off by an interruption
                        continue
                    raise ValueError(f"{self.path}, line {n}: not an answer record; move the file away to "
                                     f"start over") from None
                if rec.output is not None:
                    self.answered[rec.question_id] = rec
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, rec: Asked) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(asdict(rec)) + "\n")
        if rec.output is not None:
            self.answered[rec.question_id] = rec


def check_base_url(url: str) -> str:
    """`url` if it is an http(s) URL with a host; else a ValueError that says what to pass (a URL
    without a scheme would otherwise fail every try, retried for a minute)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the endpoint URL {redact(url)!r} is not an http:// or https:// URL with a host: pass the "
                         f"API's base URL, e.g. http://127.0.0.1:8001/v1")
    return url


class Endpoint:
    """An OpenAI-compatible chat endpoint (module docstring). `url`: the API's base, e.g.
    `http://127.0.0.1:8001/v1`; `model`: the model name it expects."""

    def __init__(self, url: str, model: str, api_key: str | None = None, *, concurrency: int = 8,
                 timeout_s: float = 120.0, retries: int = 4, max_tokens: int = 2048, backoff_s: float = 1.0):
        if concurrency < 1 or retries < 0 or timeout_s <= 0:
            raise ValueError("concurrency must be at least 1, retries at least 0, the timeout positive")
        check_base_url(url)
        self.url, self.model, self.api_key = url.rstrip("/"), model, api_key
        self.concurrency, self.timeout_s, self.retries = concurrency, timeout_s, retries
        self.max_tokens, self.backoff_s = max_tokens, backoff_s

    def ask(self, prompts: dict[str, str], on_answer: Callable[[Asked], None] | None = None) -> list[Asked]:
        """Ask every prompt ({question id: message}); `on_answer` sees each record as it arrives."""
        return asyncio.run(self._ask_all(prompts, on_answer))

    async def _ask_all(self, prompts, on_answer) -> list[Asked]:
        import httpx
        gate = asyncio.Semaphore(self.concurrency)
        headers = bearer(self.api_key)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=headers, limits=limits) as client:
            async def one(qid: str, text: str) -> Asked:
                async with gate:
                    rec = await self._ask_one(client, qid, text)
                if on_answer is not None:
                    on_answer(rec)
                return rec
            try:
                async with asyncio.TaskGroup() as group:  # an EndpointError cancels the rest
                    tasks = [group.create_task(one(q, t)) for q, t in prompts.items()]
            except* EndpointError as errors:
                raise errors.exceptions[0] from None
        return [t.result() for t in tasks]

    async def _ask_one(self, client, qid: str, text: str) -> Asked:
        import httpx
        body = {"model": self.model, "messages": [{"role": "user", "content": text}], "temperature": 0,
                "max_tokens": self.max_tokens}
        start, why = time.perf_counter(), ""
        for attempt in range(1, self.retries + 2):
            wait = None
            try:
                async with asyncio.timeout(self.timeout_s):  # the whole answer: a trickling server ends too
                    r, content = await _post_capped(client, chat_url(self.url), body)
            except (httpx.TimeoutException, TimeoutError):
                why = f"no whole answer within {self.timeout_s:g} s"
            except httpx.TransportError as e:
                why = f"connection failed ({type(e).__name__})"
            except AnswerTooLarge as e:
                return Asked(qid, error=str(e), attempts=attempt, seconds=time.perf_counter() - start)
            else:
                if r.status_code in (401, 403):
                    raise EndpointError(f"the endpoint refused the request with {r.status_code}: give the key "
                                        f"with --api-key-env VAR (the name of the variable that holds it)")
                if r.status_code == 404:
                    raise EndpointError(f"the endpoint answered 404 to POST /chat/completions for model "
                                        f"{self.model!r}: pass the API's base URL (often ending in /v1) and "
                                        f"the model name it serves")
                if retryable(r.status_code):
                    why = f"HTTP {r.status_code}"
                    wait = _retry_after(r.headers.get("retry-after"))
                elif r.status_code >= 400:
                    return Asked(qid, error=f"HTTP {r.status_code}", attempts=attempt,
                                 seconds=time.perf_counter() - start)
                else:
                    try:
                        payload = json.loads(content)
                        output = payload["choices"][0]["message"]["content"]
                        if not isinstance(output, str):
                            raise TypeError
                    except (ValueError, KeyError, IndexError, TypeError):
                        why = "an answer without choices[0].message.content"
                    else:
                        usage = payload.get("usage") or {}
                        return Asked(qid, output=output, attempts=attempt, seconds=time.perf_counter() - start,
                                     prompt_tokens=_int(usage.get("prompt_tokens")),
                                     completion_tokens=_int(usage.get("completion_tokens")))
            if attempt <= self.retries:
                delay = wait if wait is not None else self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random())
                await asyncio.sleep(min(delay, 60.0))
        return Asked(qid, error=redact(why), attempts=self.retries + 1, seconds=time.perf_counter() - start)


MAX_ANSWER_BYTES = 4 << 20  # an endpoint's answer larger than this is an error, not read on


async def _post_capped(client, url: str, body: dict):
    """(the response, its body of at most MAX_ANSWER_BYTES)."""
    async with client.stream("POST", url, json=body) as r:
        return r, await read_capped(r.aiter_bytes(), MAX_ANSWER_BYTES)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None
