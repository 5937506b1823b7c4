"""`POST /v1/chat/completions` (OpenAI's shape, plus the gateway's own fields and headers)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from ...routing.decisions import PolicyName
from .common import BLANK, MAX_QUERY_CHARS, Candidates, TEXT_PATTERN, ErrorBody, _a_number, unicode_text_only


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = Field(None, max_length=MAX_QUERY_CHARS)


USER_MESSAGE = {"type": "object", "required": ["role", "content"],
                "properties": {"role": {"const": "user"}, "content": {"type": "string", "pattern": TEXT_PATTERN}}}


CONTROL_FIELDS = ("policy", "max_cost", "candidates", "min_p", "sticky", "target_p", "target_share", "budget_per_1k",
                  "max_params_b")


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
    candidates: Candidates | None = None
    max_params_b: float | None = Field(None, ge=0, description="allow only LLMs of known size up to this many "
                                                              "billion parameters")
    min_p: float | None = Field(None, ge=0, le=1, description="allow only LLMs whose P(correct) reaches this")
    sticky: StrictBool | None = Field(None, description="true: `user` is a conversation key, and the conversation "
                                                        "keeps its LLM; false: route this turn afresh (default: "
                                                        "pinned only by an x-jeirt-conversation header)")
    target_p: float | None = Field(None, ge=0, le=1, description="quality_target: the cheapest LLM whose p reaches "
                                                                 "this")
    target_share: float | None = Field(None, gt=0, le=1, description="quality_target: the cheapest LLM whose p "
                                                                     "reaches this share of the best p")
    budget_per_1k: float | None = Field(None, gt=0, description="budget: USD per 1,000 requests on average")

    _numbers = field_validator("max_cost", "min_p", "target_p", "target_share", "budget_per_1k", "max_params_b",
                               mode="before")(_a_number)
    _text = model_validator(mode="before")(unicode_text_only)  # extra fields go upstream as they came

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

    @property
    def prompt_text(self) -> str:
        """Every message's text, for counting the prompt's tokens where an upstream reports none."""
        return "\n".join(m.content for m in self.messages if m.content)

    def upstream_payload(self) -> dict:
        """The request as the upstream gets it: without the gateway's own fields."""
        return self.model_dump(exclude_none=True, exclude=set(CONTROL_FIELDS))


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


ROUTING_HEADERS = {
    "x-jeirt-request-id": "the decision's id, for POST /v1/feedback (also the body's `id`)",
    "x-jeirt-model": "the LLM that answered", "x-jeirt-p-correct": "its predicted P(correct)",
    "x-jeirt-policy": "the routing policy applied", "x-jeirt-space": "the space routed with (<model>/<version>)",
    "x-jeirt-fallbacks": "the LLMs whose upstream failed before it, comma-separated (empty: none)",
    "x-jeirt-expected-cost": "the chosen LLM's expected cost in USD (where prices are configured)",
    "x-jeirt-cost": "what the answer cost in USD: its usage tokens x the LLM's prices (a JSON answer, where prices "
                    "are configured and the upstream reports usage)"}


class UpstreamError(BaseModel):
    """A 4xx an upstream answered, passed through as it sent it (OpenAI's error shape or its own)."""
    model_config = ConfigDict(extra="allow")


# One server-sent event (OpenAPI before 3.2 has a stream's `schema` describe each of its events)
SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "description": "a chat.completion.chunk as JSON, an error event's JSON, or [DONE]"},
    "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"}}}

CHAT_RESPONSES = {
    200: {"model": ChatResponse, "description": "the upstream's chat completion (or, without upstreams, the "
          "routing decision); with `stream: true`, the upstream's server-sent events",
          "content": {"text/event-stream": {"schema": SSE_EVENT}},
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
