"""`POST /v1/feedback`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...feedback.log import ID_PATTERN
from .common import _a_number

Source = Literal["user", "judge", "key"]


class FeedbackRequest(BaseModel):
    """A grade of one routed answer: the decision's `id` (the `x-jeirt-request-id` header, or the
    body's `id`), which query of a batched /v1/route (`query_index`), the score (1 good, 0 bad,
    or between) and who gave it. Recorded once per (id, query_index, source)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN, description="the decision's id (28 hex digits)")
    query_index: int = Field(0, ge=0, lt=64, description="the query of a batched /v1/route request")
    score: float = Field(ge=0, le=1, description="1: a good answer, 0: a bad one")
    source: Source | None = Field(None, description="user: a person's rating; judge: an LLM judge's grade; key: an "
                                                    "answer key's. Default: user, or the one source the key may claim; "
                                                    "a key claims only its own sources (`jeirt keys create --sources`)")
    llm: str | None = Field(None, min_length=1, max_length=200,
                            description="the LLM whose answer is graded (default and, but for admin keys, only: the "
                                        "one that answered a chat, the chosen one of a route)")
    comment: str | None = Field(None, max_length=2000)

    _numbers = field_validator("score", "query_index", mode="before")(_a_number)


class FeedbackResponse(BaseModel):
    id: str
    query_index: int
    source: Source
    llm: str
    status: Literal["recorded", "unchanged"] = Field(description="unchanged: the same feedback was recorded before")
