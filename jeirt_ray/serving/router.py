"""The routing core: plain classes that the Serve deployments wrap (testable without Ray).

`RouterCore` scores every LLM of a space for encoder embeddings with one matrix product per
ensemble member and applies a policy: by default `tuned`, the one chosen on validation questions
and stored with the space (routing.policies.tune_routing), so serving routes as evaluated.
`SpaceSource` loads a space from the MLflow registry and swaps it only for one that loads and
fits the encoder: a bad new version never replaces a working one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..model.space import Space
from ..routing.policies import Policy, SignalBuilder
from .schemas import ModelScore, RouteDecision, RouteRequest

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request that matches the schema but cannot be served; `status` is its HTTP answer."""
    status = 422


class NotFound(RequestError):
    """The request names an LLM or question that the space does not have."""
    status = 404


class Conflict(RequestError):
    """The request needs something the service is not configured with (e.g. a cost table)."""
    status = 409


@dataclass
class RouterSettings:
    """The live settings of a router (Serve's user_config)."""

    model: str
    alias: str = "champion"
    default_policy: str = "tuned"
    costs: dict[str, float] | None = None
    refresh_s: float = 5.0  # how often the alias is re-resolved
    upstreams: dict[str, str] | None = None  # LLM name -> OpenAI-compatible base URL

    @property
    def uri(self) -> str:
        return f"models:/{self.model}@{self.alias}"


class RouterCore:
    def __init__(self, space: Space, label: str, costs: dict[str, float] | None = None,
                 default_policy: str = "tuned"):
        self.space, self.label, self.default_policy = space, label, default_policy
        self.names = list(space.model_names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.costs = None
        if costs:
            missing = [n for n in self.names if n not in costs]
            if missing:
                raise ValueError(f"the cost table has no price for {missing[:5]}{'...' if len(missing) > 5 else ''}")
            self.costs = np.array([float(costs[n]) for n in self.names])
        self.benchmarks, self.centroids = self._centroids(space)
        self.tuned = None  # (Policy, SignalBuilder) chosen on validation, when the space has one
        chosen = space.metadata.get("routing_policy")
        if chosen and space.routing:
            fields = {k: chosen[k] for k in Policy.model_fields if k in chosen}
            self.tuned = (Policy(**fields), SignalBuilder.from_arrays(space.routing, chosen["benchmarks"]))

    @staticmethod
    def _centroids(space: Space):
        """Unit mean direction of each benchmark's questions in the frozen encoder space."""
        if space.question_embeddings is None or not space.question_benchmarks:
            return [], None
        x = space.question_embeddings / np.linalg.norm(space.question_embeddings, axis=1, keepdims=True).clip(1e-9)
        bench = np.asarray(space.question_benchmarks)
        names = sorted(set(bench))
        c = np.stack([x[bench == b].mean(0) for b in names])
        return names, c / np.linalg.norm(c, axis=1, keepdims=True).clip(1e-9)

    def route(self, x: np.ndarray, req: RouteRequest) -> list[RouteDecision]:
        x = np.atleast_2d(np.asarray(x, dtype=np.float32))
        policy = req.policy or self.default_policy
        cand = np.arange(len(self.names))
        if req.candidates:
            unknown = [c for c in req.candidates if c not in self.index]
            if unknown:
                raise NotFound(f"unknown candidate LLM(s) {unknown}; this space serves {len(self.names)} "
                                   f"LLMs (GET /v1/models)")
            cand = np.array([self.index[c] for c in dict.fromkeys(req.candidates)])
        if policy in ("cost_weighted", "cheapest_within_margin") or req.budget is not None:
            if self.costs is None:
                raise Conflict(f"policy {policy!r} and budget need a cost table; none is configured (set "
                               f"the Router's user_config.costs)")
        if req.budget is not None:
            cand = cand[self.costs[cand] <= req.budget]
            if not len(cand):
                raise Conflict(f"no candidate LLM costs at most the budget {req.budget}")
        p_all = self.space.predict_proba(x)
        probs = p_all[:, cand]  # (n, C)
        tuned_pick = None
        if policy == "tuned" and self.tuned is not None:
            chosen_policy, builder = self.tuned
            available = np.zeros(p_all.shape, dtype=bool)
            available[:, cand] = True
            position = np.full(p_all.shape[1], -1)
            position[cand] = np.arange(len(cand))
            tuned_pick = position[chosen_policy.choose(builder.build(p_all, x, chosen_policy), available)]
        norms = np.linalg.norm(self.space.question_vectors(x), axis=1)
        nearest = None
        if self.centroids is not None:
            xn = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)
            nearest = [self.benchmarks[i] for i in (xn @ self.centroids.T).argmax(1)]
        costs = self.costs[cand] if self.costs is not None else None
        out = []
        for i, p in enumerate(probs):
            if tuned_pick is not None:
                pick = int(tuned_pick[i])
            elif policy in ("most_likely", "tuned"):  # tuned without a stored policy: the highest p
                pick = int(p.argmax())
            elif policy == "cost_weighted":
                pick = int((p - req.cost_weight * costs).argmax())
            else:  # cheapest_within_margin
                ok = np.flatnonzero(p >= p.max() - req.margin)
                pick = int(ok[np.argmin(costs[ok])])
            order = np.argsort(-p)[:req.top_k] if req.top_k else np.argsort(-p)
            scores = [ModelScore(model=self.names[cand[j]], p_correct=float(p[j]),
                                 cost=None if costs is None else float(costs[j])) for j in order]
            out.append(RouteDecision(query_index=i, chosen=self.names[cand[pick]], policy=policy,
                                     p_correct=float(p[pick]),
                                     expected_cost=None if costs is None else float(costs[pick]),
                                     difficulty=float(norms[i]), nearest_benchmark=nearest and nearest[i],
                                     scores=scores))
        return out


class RegistryUnreachable(LookupError):
    """The registry could not answer (server down, database locked)."""


class SpaceSource:
    """Loads `models:/<name>@<alias>`, and the version it points at when the alias moves."""

    def __init__(self, tracking_uri: str | None, encoder_id: str):
        from ..registry import Registry
        self.registry = Registry(tracking_uri)
        self.encoder_id = encoder_id
        self.version: str | None = None
        self.checked = 0.0

    def resolve(self, settings: RouterSettings) -> str:
        try:
            return str(self.registry.client.get_model_version_by_alias(settings.model, settings.alias).version)
        except Exception as e:
            missing = getattr(e, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"  # an answer, not an outage
            raise (LookupError if missing else RegistryUnreachable)(
                f"cannot resolve {settings.uri} in the registry at {self.registry.tracking_uri}: {e}") from e

    def load(self, settings: RouterSettings, version: str) -> Space:
        uri = f"models:/{settings.model}/{version}"
        space = self.registry.load(uri)
        if space.encoder_id != self.encoder_id:
            raise ValueError(f"{uri} was trained on encoder {space.encoder_id!r} but this service encodes "
                             f"with {self.encoder_id!r}")
        return space

    def changed(self, settings: RouterSettings) -> tuple[str, Space] | None:
        """Look the alias up: (version, space) when it points somewhere new and that version
        loads; None when it has not moved."""
        self.checked = time.monotonic()
        version = self.resolve(settings)
        if version == self.version:
            return None
        space = self.load(settings, version)
        self.version = version
        return version, space
