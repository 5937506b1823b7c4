"""`POST /v1/route`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...routing.decisions import DEFAULT_TOP_K, RouteDecision
from ...core.renamed import renamed_fields
from .common import BLANK, MAX_QUERIES, Candidates, Policy, Query, _a_number, exactly_one_of


class RouteRequest(BaseModel):
    """Route one query or a batch. Policies: `tuned` (the policy chosen on validation questions
    and stored with the space, see jeirt_ray/routing/policies.py; the highest p where the space
    has none), `most_likely` (highest predicted probability of a correct answer), `cost_weighted`
    (expected utility: maximise p - cost_weight * cost, cost in USD), `cheapest_within_margin`
    (the cheapest LLM whose p is within `margin` of the best), `quality_target` (the cheapest LLM
    whose p reaches `target_p`, or `target_share` of the best p), `budget` (expected utility
    with the weight that spends `budget_per_1k` USD per 1,000 queries on average); `max_cost`
    drops LLMs costing more USD per call (old name: `budget`). Costs are USD per query: input
    tokens x input price + expected answer tokens x output price."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=exactly_one_of("query", "string", "queries", "array"))
    query: Query | None = None
    queries: list[Query] | None = Field(None, min_length=1, max_length=MAX_QUERIES)
    candidates: Candidates | None = None
    max_params_b: float | None = Field(None, ge=0, description="allow only LLMs of known size up to this many "
                                                              "billion parameters")
    top_k: int | None = Field(DEFAULT_TOP_K, ge=1, description="LLMs listed in `scores` (null: every allowed one)")
    policy: Policy | None = None
    cost_weight: float = Field(0.0, ge=0)
    margin: float = Field(0.02, ge=0, le=1)
    max_cost: float | None = Field(None, ge=0, description="drop LLMs costing more USD per call (old name: budget)")
    min_p: float | None = Field(None, ge=0, le=1, description="allow only LLMs whose p reaches this")
    target_p: float | None = Field(None, ge=0, le=1, description="quality_target: the cheapest LLM whose p "
                                                                 "reaches this")
    target_share: float | None = Field(None, gt=0, le=1, description="quality_target: the cheapest LLM whose p "
                                                                     "reaches this share of the best LLM's p")
    budget_per_1k: float | None = Field(None, gt=0, description="budget: USD per 1,000 queries to spend on "
                                                                "average")

    _numbers = field_validator("top_k", "cost_weight", "margin", "max_cost", "min_p", "target_p", "target_share",
                               "budget_per_1k", "max_params_b", mode="before")(_a_number)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        return renamed_fields(data, {"budget": "max_cost"}, "POST /v1/route")

    @model_validator(mode="after")
    def one_of_query_queries(self):
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        return self

    @property
    def texts(self) -> list[str]:
        return [q.strip(BLANK) for q in ([self.query] if self.query is not None else self.queries)]

    def options(self) -> dict:
        """The routing options, as `routing.router.SpaceRouter.route` takes them."""
        options = self.model_dump(include={"policy", "top_k", "cost_weight", "margin", "max_cost", "min_p",
                                           "target_p", "target_share", "budget_per_1k", "max_params_b"})
        return {**options, "candidates": self.candidates}


class RouteResponse(BaseModel):
    id: str = Field(description="the request's decision id (also the x-jeirt-request-id header), for "
                                "POST /v1/feedback; a batch's queries are its query_index 0..n-1")
    space: str
    results: list[RouteDecision]
