"""Request and response bodies of the HTTP API (pydantic: every request is validated)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

MAX_QUERY_CHARS = 8000
MAX_QUERIES = 64
MAX_RESPONSES = 100_000
Query = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_CHARS)]
Policy = Literal["tuned", "most_likely", "cost_weighted", "cheapest_within_margin"]


class RouteRequest(BaseModel):
    """Route one query or a batch. Policies: `tuned` (the policy chosen on validation questions
    and stored with the space, see jeirt_ray/routing/policies.py; the highest p where the space
    has none), `most_likely` (highest predicted probability of a correct answer), `cost_weighted`
    (maximise p - cost_weight * cost), `cheapest_within_margin` (the cheapest LLM whose p is
    within `margin` of the best); `budget` drops LLMs costing more."""

    model_config = ConfigDict(extra="forbid")
    query: Query | None = None
    queries: list[Query] | None = Field(None, min_length=1, max_length=MAX_QUERIES)
    candidates: list[str] | None = Field(None, min_length=1)
    top_k: int | None = Field(None, ge=1)
    policy: Policy | None = None
    cost_weight: float = Field(0.0, ge=0)
    margin: float = Field(0.02, ge=0, le=1)
    budget: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def one_of_query_queries(self):
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        return self

    @property
    def texts(self) -> list[str]:
        return [self.query] if self.query is not None else list(self.queries)


class ModelScore(BaseModel):
    model: str
    p_correct: float
    cost: float | None = None


class RouteDecision(BaseModel):
    query_index: int
    chosen: str
    policy: Policy
    p_correct: float
    expected_cost: float | None = None
    difficulty: float = Field(description="||E_Q||: larger means harder")
    nearest_benchmark: str | None = None
    scores: list[ModelScore]


class RouteResponse(BaseModel):
    space: str
    results: list[RouteDecision]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = Field(None, max_length=MAX_QUERY_CHARS)


class ChatRequest(BaseModel):
    """OpenAI's chat-completions request shape; extra fields are passed upstream untouched."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)

    @field_validator("messages")
    @classmethod
    def has_user_message(cls, messages):
        if not any(m.role == "user" and m.content and m.content.strip() for m in messages):
            raise ValueError("no user message with text content to route")
        return messages

    @property
    def last_user_text(self) -> str:
        return next(m.content for m in reversed(self.messages) if m.role == "user" and m.content and m.content.strip())


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question_id: str | None = Field(None, min_length=1)
    text: Query | None = None
    label: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def one_of_id_text(self):
        if (self.question_id is None) == (self.text is None):
            raise ValueError("each response gives exactly one of 'question_id' or 'text'")
        return self


class OnboardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=200)
    responses: list[Response] = Field(min_length=1, max_length=MAX_RESPONSES)
    promote: bool = False
    holdout: float = Field(0.2, ge=0, lt=1)
    suggest: int = Field(10, ge=0, le=1000)
