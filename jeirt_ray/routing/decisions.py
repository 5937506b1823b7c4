"""What a routing decision is: the same type for `jr.Space.route`, the Serve router and the HTTP
API's `POST /v1/route` (serving/schemas/route.py declares its responses with it). Typed dicts, so
that a decision is plain Python (str, float, list, dict) and goes through JSON unchanged."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

PolicyName = Literal["tuned", "most_likely", "cost_weighted", "cheapest_within_margin", "quality_target", "budget"]
POLICIES: tuple[str, ...] = PolicyName.__args__
DEFAULT_TOP_K = 5  # LLMs listed in a decision's `scores` (None: every allowed one), everywhere


class ModelScore(TypedDict):
    model: str
    p_correct: float
    score: Annotated[float, Field(description="the policy's own score, which it ranks the LLMs by (p blended "
                                              "with the neighbour and topic signals for `tuned`, p - cost_weight "
                                              "x cost for `cost_weighted`, p otherwise)")]
    cost: float | None


class RouteDecision(TypedDict):
    query_index: int
    chosen: str
    policy: PolicyName
    p_correct: float
    propensity: Annotated[float, Field(description="the probability with which the policy chose this LLM: 1 "
                                                   "unless the service explores (user_config.learning.explore)")]
    explored: Annotated[bool, Field(description="exploration chose another LLM than the policy's own best")]
    policy_choice: Annotated[str, Field(description="the policy's own best: `chosen` unless explored (a key is "
                                                    "charged at most what that LLM would have cost: exploring's "
                                                    "extra is the service's)")]
    expected_cost: float | None
    difficulty: Annotated[float, Field(description="||E_Q||: larger means harder")]
    nearest_benchmark: str | None
    ranking: Annotated[list[str], Field(description="the policy's order of the allowed LLMs, the chosen first "
                                                    "(the gateway's fallbacks)")]
    scores: list[ModelScore]
