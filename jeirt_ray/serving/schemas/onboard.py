"""`POST /v1/onboard`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from ...core.renamed import renamed_fields
from ...model.onboarding_defaults import DEFAULT_BATCH, DEFAULT_PURPOSE, DEFAULT_TARGET_WIDTH, PURPOSES, STRATEGIES
from .common import MAX_RESPONSES, Query, _a_number, exactly_one_of


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


Prices = list[Annotated[float, Field(ge=0, lt=1e9)]] | None


def _price_numbers(v):
    if isinstance(v, list):
        for p in v:
            _a_number(p)
    return v


class OnboardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=200)
    responses: list[Response] = Field(min_length=1, max_length=MAX_RESPONSES)
    promote: StrictBool = False
    replace: StrictBool = Field(False, description="refit an LLM that the space has already (without: 409)")
    holdout: float = Field(0.2, ge=0, lt=1)
    suggest: int = Field(10, ge=0, le=1000)
    price_usd_per_mtok: Prices = Field(None, min_length=2, max_length=2, description="the new LLM's USD per "
                                       "million input and output tokens: the router prices it so (without: as "
                                       "the dearest LLM)")

    _numbers = field_validator("holdout", "suggest", mode="before")(_a_number)
    _prices = field_validator("price_usd_per_mtok", mode="before")(_price_numbers)


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


class Answered(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question_id: str = Field(min_length=1)
    label: float = Field(ge=0, le=1)

    _numbers = field_validator("label", mode="before")(_a_number)


class PlanRequest(BaseModel):
    """`POST /v1/onboard/plan`: the next questions to ask a new LLM, for users who grade with
    their own harness (model/adaptive.py)."""
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=200, description="the new LLM's name")
    answered: list[Answered] = Field([], max_length=MAX_RESPONSES, description="its graded answers so far "
                                     "(question ids of the served space)")
    k: int = Field(DEFAULT_BATCH, ge=0, le=1000, description="how many questions to plan")
    purpose: Literal[PURPOSES] = Field(DEFAULT_PURPOSE, description="what the answers are "
                                                          "for: routing, estimating its accuracy, or both; picks "
                                                          "the strategy")
    strategy: Literal[STRATEGIES] | None = Field(
        None, description="how questions are chosen (default: the purpose's): adaptive (those that tell most), "
        "random or stratified (a seeded random order, by benchmark), weighted (random, more often where the known "
        "LLMs are unsure), mixed (some of each)")
    benchmarks: list[str] | None = Field(None, min_length=1, max_length=1000,
                                         description="ask and predict only within these benchmarks")
    target_width: float = Field(DEFAULT_TARGET_WIDTH, ge=0, le=1, description="stop once the vector's part of the 90% interval "
                                                              "of the predicted accuracy is narrower")
    price_usd_per_mtok: Prices = Field(None, min_length=2, max_length=2, description="the new LLM's USD per "
                                       "million input and output tokens: questions are then chosen per dollar, "
                                       "with their estimated cost")
    max_usd: float | None = Field(None, ge=0, description="with price_usd_per_mtok: plan at most this much "
                                  "(old name: budget_usd)")

    _numbers = field_validator("k", "target_width", "max_usd", mode="before")(_a_number)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        return renamed_fields(data, {"budget_usd": "max_usd"}, "POST /v1/onboard/plan")

    _prices = field_validator("price_usd_per_mtok", mode="before")(_price_numbers)


class PlannedQuestion(BaseModel):
    question_id: str
    benchmark: str
    gain: float | None = Field(description="expected reduction of the variance of P(correct) over the "
                                           "benchmark's questions (adaptive only)")
    cost_usd: float | None


class PredictedAccuracy(BaseModel):
    accuracy: float = Field(description="the estimate: the space's predictions, the answered questions as answered, "
                                        "corrected by the answers to questions drawn at random; with the anchored "
                                        "strategy, learned from the answers to the anchors on the known LLMs")
    low: float = Field(description="the 90% interval: the new vector's uncertainty, the space's own error and the "
                                   "correction's noise")
    high: float
    questions: int
    vector_width: float = Field(description="the width of the vector's part of the interval, which more answers "
                                            "narrow")
    model_accuracy: float = Field(description="the space's prediction alone (mean P(correct), answered questions as "
                                              "answered)")
    correction_weight: float = Field(description="how far the random answers' correction moved the estimate (0: "
                                                 "not at all, 1: all the way)")
    random_answers: int = Field(description="answers to questions drawn at random, which carry the correction")
    anchor_answers: int = Field(0, description="answers to the space's anchor questions the estimate was learned "
                                               "from (the anchored strategy; 0: the space's predictions)")


class PlanResponse(BaseModel):
    space: str
    questions: list[PlannedQuestion]
    predicted: dict[str, PredictedAccuracy] = Field(description='"overall" and each benchmark: the predicted '
                                                                "accuracy with its 90% interval")
    interval_width: float
    stop: bool = Field(description="the overall interval's vector part is narrower than target_width: more "
                                   "answers would not narrow it much")
    answered: int
