"""Limits, shared field types and the error body of every route."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from ...routing.decisions import PolicyName

MAX_QUERY_CHARS = 8000


MAX_QUERIES = 64


MAX_RESPONSES = 100_000


# request bodies above these sizes are refused with 413 before they are read in full
MAX_BODY_BYTES = 4 * 2**20


MAX_ONBOARD_BODY_BYTES = 64 * 2**20


# some text besides ASCII white space (a JSON-schema pattern matches anywhere in the string). Spelt
# out because `\S` differs between regex engines (pydantic's Rust, Python's, ECMAScript's).
BLANK = " \t\n\r\f\v"


TEXT_PATTERN = r"[^ \t\n\r\f\v]"


Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS, pattern=TEXT_PATTERN)]


Policy = PolicyName


def _a_number(value):
    """pydantic's lax mode would take true for 1 and "5" for 5, which the schema refuses."""
    if isinstance(value, (bool, str)):
        raise ValueError("must be a JSON number")
    return value


def unicode_text_only(body):
    """`body` (parsed JSON) unchanged, or a ValueError naming a key or string in it that is not
    Unicode text: a lone UTF-16 surrogate, which JSON can escape (\\ud800) but no UTF-8 holds.
    For fields passed on untouched (extra fields): typed ones refuse it themselves, and passed on
    it fails to encode. Iterative: deep nesting is no recursion."""
    def check(path: str, text: str) -> None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{path}: not Unicode text (a lone UTF-16 surrogate)") from None

    stack = [("body", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            check(path, value)
        elif isinstance(value, dict):
            for k in value:  # before any path is made of them
                check(f"{path}, a key", k)
            stack += [(f"{path}.{k[:40]}", v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{path}.{i}", v) for i, v in enumerate(value)]
    return body


def exactly_one_of(a: str, a_type: str, b: str, b_type: str) -> dict:
    """JSON schema: exactly one of properties `a` and `b` is given (and not null)."""
    return {"oneOf": [{"required": [a], "properties": {a: {"type": a_type}}},
                      {"required": [b], "properties": {b: {"type": b_type}}}]}


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error answer: a one-line `error`, and for validation errors each problem in `detail`."""
    error: str
    detail: list[ErrorItem] | None = None


LLMName = Field(min_length=1, max_length=512)


class CandidateObject(BaseModel):
    """The LLMs a request allows, as an object: `names` (names or globs) and/or `max_params_b`."""
    model_config = ConfigDict(extra="forbid")
    names: Annotated[list[Annotated[str, LLMName]], Field(min_length=1)] | Annotated[str, LLMName] | None = Field(
        None, description="LLM names or globs (\"*Mistral*\", any case)")
    max_params_b: float | None = Field(None, ge=0, description="only LLMs of known size up to this many billion "
                                                               "parameters")

    _numbers = field_validator("max_params_b", mode="before")(_a_number)


# what `candidates` takes: a list of LLM names or globs, one glob ("*Mistral*"), or an object
Candidates = Annotated[Union[Annotated[list[Annotated[str, LLMName]], Field(min_length=1)], Annotated[str, LLMName],
                             CandidateObject],
                       Field(description="the LLMs allowed: a list of names or globs (\"*Mistral*\", any case), one "
                                         "glob, or {names, max_params_b}; none matching is a 400")]
