"""`GET /v1/models`, `GET /health` and the explorer's LLM table."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str
    registry_version: str
    usd_per_call: float | None = Field(description="USD per call, where user_config.usd_per_call sets one")
    cost: float | None = Field(description="deprecated: the same as usd_per_call", deprecated=True)
    input_usd_per_mtok: float | None = Field(None, description="USD per million input tokens, where prices are set")
    output_usd_per_mtok: float | None = Field(None, description="USD per million output tokens, where prices are set")
    params_b: float | None = Field(None, description="size in billions of parameters, where known (the training "
                                                     "folder's models.csv, or given at onboarding)")


class ModelsResponse(BaseModel):
    """One page of the served LLMs, in the space's order (OpenAI's list shape plus `has_more`:
    ask for the next page with `after=last_id`)."""
    object: Literal["list"] = "list"
    space: str
    alias: str
    data: list[ModelCard]
    has_more: bool = Field(False, description="more LLMs match after this page")
    first_id: str | None = None
    last_id: str | None = None
    total: int = Field(description="LLMs the space serves")


class SimilarLLM(BaseModel):
    llm: str
    agreement: float | None = Field(description="share of the questions both answered where their labels match "
                                                "(null: fewer than 20 shared)")
    shared: int = Field(description="questions both answered")
    cosine: float = Field(description="cosine of their vectors, averaged over the space's members")
    params_b: float | None = None


class SimilarResponse(BaseModel):
    space: str
    llm: str
    by: Literal["agreement", "cosine"]
    similar: list[SimilarLLM]


class RegistryState(BaseModel):
    reachable: bool
    error: str | None = Field(None, description="why the version that the alias points at is not the one serving "
                                                "(the registry cannot be read, or that version was refused)")
    seconds_since_check: float | None = None


class ExplorationSpend(BaseModel):
    queries: int = Field(description="chat queries this replica routed since exploring was last set (the base "
                                     "of explore_usd_per_1k's allowance; POST /v1/route decisions are not counted)")
    explored: int = Field(description="queries (chat and route) routed to another LLM than the policy's own best")
    exploration_usd: float = Field(description="what the explored choices added to the expected cost (USD)")


class LearningState(BaseModel):
    enabled: bool = Field(description="user_config.learning.enabled")
    error: str | None = Field(None, description="why learning is paused (the feedback database cannot be read)")
    seq: int = Field(description="the last feedback row read")
    applied: int = Field(description="grades applied to the served version's vectors")
    skipped: int = Field(description="grades of another encoder or of LLMs the space lacks")
    explore: float = Field(description="user_config.learning.explore: the share of queries explored")
    exploration: ExplorationSpend


class ShadowState(BaseModel):
    share: float = Field(description="user_config.shadow.share: the share of requests the challenger also routes")
    alias: str = Field(description="user_config.shadow.alias")
    space: str | None = Field(None, description="the shadow space routing (none: no version has that alias)")
    error: str | None = Field(None, description="why no shadow routes, or why its last route failed")
    routed: int = Field(description="requests this replica's shadow routed and logged")
    failed: int = Field(description="requests the shadow could not route (e.g. a policy it has no prices for)")
    skipped: int = Field(description="sampled requests not shadowed because 64 shadow routes were in flight")


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="'degraded': serving the loaded version while the "
                                                          "registry cannot be read")
    space: str | None = Field(None, description="the served space (admin keys only)")
    llms: int | None = Field(None, description="admin keys only")
    registry: RegistryState | None = Field(None, description="admin keys only")
    learning: LearningState | None = Field(None, description="admin keys only")
    shadow: ShadowState | None = Field(None, description="admin keys only")


class KeyUsage(BaseModel):
    requests_minute: int
    tokens_minute: int
    usd_day: float
    usd_month: float


class KeyRemaining(BaseModel):
    requests_minute: int | None
    tokens_minute: int | None
    usd_day: float | None
    usd_month: float | None


class KeyResponse(BaseModel):
    """`GET /v1/keys/me`: the calling key (never the key itself). Periods are UTC calendar
    minutes, days and months."""
    id: str
    name: str
    scopes: list[str]
    sources: list[str] = Field(description="what its grades (POST /v1/feedback) may say they come from")
    rpm: int | None
    tpm: int | None
    usd_per_day: float | None
    usd_per_month: float | None
    grades_per_minute: int | None = Field(None, description="grades it may give per minute (null: no cap)")
    grades_per_day: int | None = Field(None, description="grades it may give per UTC day (null: no cap)")
    grade_weight: float = Field(1.0, description="how much each of its grades counts in learning (0: recorded, "
                                                 "learned from nothing)")
    created: str
    revoked: str | None
    usage: KeyUsage | None = Field(description="null for the admin token, which has no limits")
    remaining: KeyRemaining | None


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
