"""Request and response bodies of the HTTP API, one module per route (pydantic: every request is
validated).

The published JSON schema says exactly what the service accepts: rules that pydantic checks in
code (one of `query`/`queries`, a user message to route) are also written into the schema, so
that a client generated from /openapi.json, or a schema-driven fuzzer, meets no surprises."""

from .common import BLANK, ErrorBody, ErrorItem, MAX_BODY_BYTES, MAX_ONBOARD_BODY_BYTES, MAX_QUERIES, MAX_QUERY_CHARS, MAX_RESPONSES, Policy, Query, TEXT_PATTERN, exactly_one_of
from ...routing.decisions import ModelScore, RouteDecision
from .route import RouteRequest, RouteResponse
from .chat import CHAT_RESPONSES, CONTROL_FIELDS, ChatMessage, ChatRequest, ChatResponse, ROUTING_HEADERS, USER_MESSAGE, UpstreamError
from .onboard import Answered, OnboardRequest, OnboardResponse, PlanRequest, PlanResponse, PlannedQuestion, PredictedAccuracy, Response
from .service import HealthResponse, KeyResponse, KeyRemaining, KeyUsage, LLMsResponse, ModelCard, ModelsResponse, RegistryState, RegistryVersion, SimilarLLM, SimilarResponse
from .feedback import FeedbackRequest, FeedbackResponse
from .explore import Histogram, MapLLMs, MapPoints, MapResponse

__all__ = ["Answered", "PlanRequest", "PlanResponse", "PlannedQuestion", "PredictedAccuracy", "BLANK", "CHAT_RESPONSES", "CONTROL_FIELDS", "ChatMessage", "ChatRequest", "ChatResponse", "ErrorBody", "ErrorItem", "FeedbackRequest", "FeedbackResponse", "HealthResponse", "Histogram", "KeyRemaining", "KeyResponse", "KeyUsage", "LLMsResponse", "MAX_BODY_BYTES", "MAX_ONBOARD_BODY_BYTES", "MAX_QUERIES", "MAX_QUERY_CHARS", "MAX_RESPONSES", "MapLLMs", "MapPoints", "MapResponse", "ModelCard", "ModelScore", "ModelsResponse", "OnboardRequest", "OnboardResponse", "Policy", "Query", "ROUTING_HEADERS", "RegistryState", "RegistryVersion", "Response", "RouteDecision", "RouteRequest", "RouteResponse", "SimilarLLM", "SimilarResponse", "TEXT_PATTERN", "USER_MESSAGE", "UpstreamError", "exactly_one_of"]
