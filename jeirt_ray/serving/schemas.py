"""Request and response bodies of the HTTP API (pydantic: every request is validated).

The published JSON schema says exactly what the service accepts: rules that pydantic checks in
code (one of `query`/`queries`, a user message to route) are also written into the schema, so
that a client generated from /openapi.json, or a schema-driven fuzzer, meets no surprises."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator, model_validator

from ..routing.router import PolicyName

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



def exactly_one_of(a: str, a_type: str, b: str, b_type: str) -> dict:
    """JSON schema: exactly one of properties `a` and `b` is given (and not null)."""
    return {"oneOf": [{"required": [a], "properties": {a: {"type": a_type}}},
                      {"required": [b], "properties": {b: {"type": b_type}}}]}


class RouteRequest(BaseModel):
    """Route one query or a batch. Policies: `tuned` (the policy chosen on validation questions
    and stored with the space, see jeirt_ray/routing/policies.py; the highest p where the space
    has none), `most_likely` (highest predicted probability of a correct answer), `cost_weighted`
    (maximise p - cost_weight * cost), `cheapest_within_margin` (the cheapest LLM whose p is
    within `margin` of the best); `budget` drops LLMs costing more."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=exactly_one_of("query", "string", "queries", "array"))
    query: Query | None = None
    queries: list[Query] | None = Field(None, min_length=1, max_length=MAX_QUERIES)
    candidates: list[str] | None = Field(None, min_length=1)
    top_k: int | None = Field(None, ge=1)
    policy: Policy | None = None
    cost_weight: float = Field(0.0, ge=0)
    margin: float = Field(0.02, ge=0, le=1)
    budget: float | None = Field(None, ge=0, description="drop LLMs costing more per call")
    min_p: float | None = Field(None, ge=0, le=1, description="allow only LLMs whose p reaches this")

    _numbers = field_validator("top_k", "cost_weight", "margin", "budget", "min_p", mode="before")(_a_number)

    @model_validator(mode="after")
    def one_of_query_queries(self):
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        return self

    @property
    def texts(self) -> list[str]:
        return [q.strip(BLANK) for q in ([self.query] if self.query is not None else self.queries)]

    def options(self) -> dict:
        """The routing options, as `routing.router.Router.route` takes them."""
        return self.model_dump(include={"policy", "candidates", "top_k", "cost_weight", "margin", "budget", "min_p"})


class ModelScore(BaseModel):
    model: str
    p_correct: float
    score: float = Field(description="the policy's own score, which it ranks the LLMs by (p blended with the "
                                     "neighbour and topic signals for `tuned`, p - cost_weight x cost for "
                                     "`cost_weighted`, p otherwise)")
    cost: float | None = None


class RouteDecision(BaseModel):
    query_index: int
    chosen: str
    policy: Policy
    p_correct: float
    expected_cost: float | None = None
    difficulty: float = Field(description="||E_Q||: larger means harder")
    nearest_benchmark: str | None = None
    ranking: list[str] = Field(description="the policy's order of the allowed LLMs, the chosen first (the "
                                           "gateway's fallbacks)")
    scores: list[ModelScore]


class RouteResponse(BaseModel):
    space: str
    results: list[RouteDecision]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = Field(None, max_length=MAX_QUERY_CHARS)


USER_MESSAGE = {"type": "object", "required": ["role", "content"],
                "properties": {"role": {"const": "user"}, "content": {"type": "string", "pattern": TEXT_PATTERN}}}


CONTROL_FIELDS = ("policy", "max_cost", "candidates", "min_p", "sticky")


class ChatRequest(BaseModel):
    """OpenAI's chat-completions request shape; extra fields are passed upstream untouched. The
    last user message with text is what is routed (with a conversation key, `user` or the
    x-jeirt-conversation header, the first: the conversation keeps its LLM). The routing fields
    (OpenAI SDK: `extra_body`) are the gateway's and are not forwarded; each may also come as an
    `x-jeirt-*` header."""

    model_config = ConfigDict(extra="allow")
    model: str | None = Field(None, description="ignored: the gateway chooses the LLM")
    messages: list[ChatMessage] = Field(min_length=1, json_schema_extra={"contains": USER_MESSAGE})
    stream: StrictBool | None = Field(None, description="stream the upstream's server-sent events as they come")
    user: str | None = Field(None, max_length=256, description="OpenAI's end-user id; also the conversation key")
    policy: PolicyName | None = Field(None, description="the routing policy (default: the service's)")
    max_cost: float | None = Field(None, ge=0, description="allow only LLMs costing at most this per call")
    candidates: list[str] | None = Field(None, min_length=1, description="the LLMs allowed")
    min_p: float | None = Field(None, ge=0, le=1, description="allow only LLMs whose P(correct) reaches this")
    sticky: StrictBool | None = Field(None, description="false: route this turn afresh even with a conversation key")

    _numbers = field_validator("max_cost", "min_p", mode="before")(_a_number)

    @field_validator("messages")
    @classmethod
    def has_user_message(cls, messages):
        if not any(m.role == "user" and m.content and m.content.strip(BLANK) for m in messages):
            raise ValueError("no user message with text content to route")
        return messages

    def _user_texts(self) -> list[str]:
        return [m.content.strip(BLANK) for m in self.messages if m.role == "user" and m.content and
                m.content.strip(BLANK)]

    @property
    def last_user_text(self) -> str:
        return self._user_texts()[-1]

    @property
    def first_user_text(self) -> str:
        return self._user_texts()[0]

    def upstream_payload(self) -> dict:
        """The request as the upstream gets it: without the gateway's own fields."""
        return self.model_dump(exclude_none=True, exclude=set(CONTROL_FIELDS))


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=exactly_one_of("question_id", "string", "text", "string"))
    question_id: str | None = Field(None, min_length=1)
    text: Query | None = None
    label: float = Field(ge=0, le=1)

    _numbers = field_validator("label", mode="before")(_a_number)

    @model_validator(mode="after")
    def one_of_id_text(self):
        if (self.question_id is None) == (self.text is None):
            raise ValueError("each response gives exactly one of 'question_id' or 'text'")
        return self


class OnboardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=200)
    responses: list[Response] = Field(min_length=1, max_length=MAX_RESPONSES)
    promote: StrictBool = False
    holdout: float = Field(0.2, ge=0, lt=1)
    suggest: int = Field(10, ge=0, le=1000)

    _numbers = field_validator("holdout", "suggest", mode="before")(_a_number)


class OnboardResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    responses: int
    members: int
    heldout: dict[str, float | int] | None = Field(None, description="quality on the held-back responses")
    fit_seconds: float
    next_questions: list[dict[str, str | float]] | None = None
    version: int
    based_on_version: int
    promoted_to: str | None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str
    registry_version: str
    cost: float | None


class ModelsResponse(BaseModel):
    object: Literal["list"] = "list"
    space: str
    alias: str
    data: list[ModelCard]


class RegistryState(BaseModel):
    reachable: bool
    error: str | None = Field(None, description="why the version that the alias points at is not the one serving "
                                                "(the registry cannot be read, or that version was refused)")
    seconds_since_check: float | None = None


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="'degraded': serving the loaded version while the "
                                                          "registry cannot be read")
    space: str
    llms: int
    registry: RegistryState


class ChatResponse(BaseModel):
    """OpenAI's chat.completion shape (an upstream's answer passes through), plus `routing`: the
    LLM chosen, its P(correct), the policy's order, and (with upstreams) who answered and which
    LLMs failed before it."""
    model_config = ConfigDict(extra="allow")
    id: str
    object: str
    created: int
    model: str
    choices: list[dict]
    routing: dict


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error answer: a one-line `error`, and for validation errors each problem in `detail`."""
    error: str
    detail: list[ErrorItem] | None = None


ROUTING_HEADERS = {
    "x-jeirt-model": "the LLM that answered", "x-jeirt-p-correct": "its predicted P(correct)",
    "x-jeirt-policy": "the routing policy applied", "x-jeirt-space": "the space routed with (<model>/<version>)",
    "x-jeirt-fallbacks": "the LLMs whose upstream failed before it, comma-separated (empty: none)"}


class UpstreamError(BaseModel):
    """A 4xx an upstream answered, passed through as it sent it (OpenAI's error shape or its own)."""
    model_config = ConfigDict(extra="allow")


CHAT_RESPONSES = {
    200: {"model": ChatResponse, "description": "the upstream's chat completion (or, without upstreams, the "
          "routing decision); with `stream: true`, the upstream's server-sent events",
          "content": {"text/event-stream": {"schema": {"type": "string"}}},
          "headers": {k: {"description": v, "schema": {"type": "string"}} for k, v in ROUTING_HEADERS.items()}},
    # an upstream's 4xx passes through with its own body: any of these may be one
    **{code: {"model": ErrorBody | UpstreamError, "description": text} for code, text in {
        400: "not UTF-8 JSON, or the upstream refused the request", 404: "a candidate LLM is not in the space",
        409: "the request needs something the service has not configured (a cost table, an upstream), asks "
             "for what no LLM meets, or gives a field twice (body and header) differently",
        413: "request body too large", 422: "invalid request (a field, a header, or a constraint no LLM meets)",
        "4XX": "an upstream's own 4xx, passed through"}.items()},
    500: {"model": ErrorBody, "description": "the service's own fault"},
    502: {"model": ErrorBody, "description": "no upstream answered (each one tried is named)"},
}


# ---- the web explorer's JSON (serving/explorer.py computes it) -----------------------------------

class MapPoints(BaseModel):
    x: list[float]
    y: list[float]
    benchmark: list[str]
    difficulty: list[float] = Field(description="||E_Q|| of each question")
    question_id: list[str]
    text: list[str] | None = Field(None, description="the question texts (cut to 300 characters), where the space stores them")


class MapLLMs(BaseModel):
    name: list[str]
    x: list[float]
    y: list[float]


class Histogram(BaseModel):
    edges: list[float]
    counts: list[int]


class MapResponse(BaseModel):
    space: str
    projection: str
    explained_variance: list[float]
    questions_total: int
    questions_shown: int
    sampling: str
    benchmarks: list[str]
    points: MapPoints
    llms: MapLLMs
    difficulty_histogram: Histogram


class RegistryVersion(BaseModel):
    version: int
    aliases: list[str]


class LLMsResponse(BaseModel):
    space: str
    benchmarks: list[str]
    llms: list[str]
    accuracy: list[list[float]] = Field(description="(LLMs x benchmarks) predicted accuracy: the mean predicted "
                                                    "probability over the benchmark's training questions")
    overall: list[float]
    onboarded: list[bool]
    versions: list[RegistryVersion] | None = Field(None, description="the registry's versions of this space, "
                                                                     "newest first (null when the registry cannot be read)")
