"""The web explorer's map (serving/explorer/views.py computes it)."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
