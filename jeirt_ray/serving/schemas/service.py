"""`GET /v1/models`, `GET /health` and the explorer's LLM table."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str
    registry_version: str
    cost: float | None = Field(description="price per call, where user_config.costs sets one")
    input_usd_per_mtok: float | None = Field(None, description="USD per million input tokens, where prices are set")
    output_usd_per_mtok: float | None = Field(None, description="USD per million output tokens, where prices are set")


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
