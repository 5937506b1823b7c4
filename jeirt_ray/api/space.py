"""The objects a Python user holds: `Space` (a trained JE-IRT space that predicts, routes and
onboards from question texts) and `Registry` (MLflow's registry of spaces).

    import jeirt_ray as jr
    space = jr.Space.load("models:/demo@champion")     # or a saved folder
    space.predict(["What is 2 + 2?"])                  # DataFrame: one column per LLM
    space.route(["What is 2 + 2?"])[0]["chosen"]       # the LLM to ask
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Union

import numpy as np
import pandas as pd

from ..tracking.registry import SpaceRegistry
from ..encoders import QuestionEncoder, make_encoder
from ..core.renamed import deprecated, take
from ..model.onboarding_defaults import DEFAULT_BATCH, DEFAULT_PURPOSE, DEFAULT_TARGET_WIDTH
from ..model.space import CoreSpace, answer_table
from ..routing.decisions import DEFAULT_TOP_K, PolicyName, RouteDecision
from ..routing.prices import LLMPrices, PriceTable, price_pair, question_costs_of, record_onboarded, resolve_prices
from ..routing.router import SpaceRouter
from ..zoo.catalog import record_size
from .texts import checked_texts

if TYPE_CHECKING:
    from .learner import Learner

log = logging.getLogger("jeirt.api")


def encoder_spec(encoder_id: str) -> str | None:
    """The `encoder=` spec that rebuilds the encoder with cache id `encoder_id`, where the id
    names it (a sentence-transformers name, the hashing encoder); None for a folder's id."""
    if encoder_id.startswith("hashing-"):
        return encoder_id
    if encoder_id.startswith("st:"):
        return encoder_id[3:]
    return None


@dataclasses.dataclass
class Space(CoreSpace):
    """A trained JE-IRT space: an ensemble of members over one LLM table and one encoder.

    Create one with `jr.train`, or load one with `Space.load`. Every method takes question texts:
    the space encodes them with the encoder it was trained on (loaded on first use).
    """

    @classmethod
    def from_core(cls, space: CoreSpace) -> "Space":
        """The public class over a space built by the core (training, the registry)."""
        return space if isinstance(space, cls) else cls(**{f.name: getattr(space, f.name)
                                                             for f in dataclasses.fields(CoreSpace)})

    @classmethod
    def load(cls, location: str | Path, *, tracking_uri: str | None = None) -> "Space":
        """A space saved with `save` (a folder), or a registered one: `models:/<name>@<alias>` or
        `models:/<name>/<version>` (the registry at `tracking_uri`, default MLFLOW_TRACKING_URI or
        $JEIRT_HOME/mlflow.db)."""
        if str(location).startswith("models:/"):
            location = SpaceRegistry(tracking_uri).download(str(location))
        return super().load(location)

    # ---- the encoder ------------------------------------------------------------------------
    @property
    def encoder(self) -> QuestionEncoder:
        """The encoder the space was trained on: its own fine-tuned one, else the shared one
        named by its encoder id (or set with `use_encoder`)."""
        enc = self.__dict__.get("_encoder")
        if enc is None:
            spec = self.encoder_dir or self.metadata.get("encoder") or encoder_spec(self.encoder_id)
            if spec is None:
                raise ValueError(f"cannot tell which encoder made {self.encoder_id!r}: call "
                                 f"space.use_encoder(<the sentence-transformers folder it was trained on>)")
            enc = self.use_encoder(spec)
        return enc

    def use_encoder(self, encoder: str | QuestionEncoder) -> QuestionEncoder:
        """Encode with `encoder` (a spec as in `jr.train(encoder=...)`, or an encoder object);
        it must be the one the space was trained on (same encoder id)."""
        enc = make_encoder(encoder) if isinstance(encoder, str) else encoder
        if enc.encoder_id != self.encoder_id:
            raise ValueError(f"encoder {enc.encoder_id!r} is not the one this space was trained on "
                             f"({self.encoder_id!r})")
        self.__dict__["_encoder"] = enc
        return enc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Frozen encoder embeddings of `texts`, (n, in_dim)."""
        texts = checked_texts(texts)
        return np.asarray(self.encoder.encode(texts), dtype=np.float32)

    # ---- what a user asks -------------------------------------------------------------------
    def predict(self, texts: Sequence[str]) -> pd.DataFrame:
        """P(correct) of every LLM on every text: one row per text (in order, indexed by the
        text), one column per LLM."""
        texts = checked_texts(texts, "predict")
        p = self.predict_proba(self.embed(texts))
        return pd.DataFrame(p, index=pd.Index(texts, name="text"), columns=pd.Index(self.model_names, name="llm"))

    def router(self, usd_per_call: dict[str, float] | None = None, prices: PricesLike = None) -> SpaceRouter:
        """The router over this space (built once per `usd_per_call` or price table: the benchmark
        centroids, the routing policy's signals and the budget weights are computed once).
        `prices`: a price table (file or `PriceTable`; default: the prices stored with the space)."""
        key = (None if usd_per_call is None else tuple(sorted((str(k), float(v)) for k, v in usd_per_call.items())),
               None if prices is None else (str(prices) if isinstance(prices, (str, Path)) else id(prices)))
        cache = self.__dict__.setdefault("_routers", {})
        if key not in cache:
            cache.clear()  # one cost table at a time is what a user holds
            cache[key] = SpaceRouter(self, usd_per_call, prices=_llm_prices(prices, self.model_names))
        return cache[key]

    def route(self, texts: Sequence[str], *, policy: PolicyName = "tuned", candidates: Sequence[str] | str | dict | None = None,
              top_k: int | None = DEFAULT_TOP_K, min_p: float | None = None, prices: PricesLike = None,
              usd_per_call: dict[str, float] | None = None, cost_weight: float = 0.0, margin: float = 0.02,
              target_p: float | None = None, target_share: float | None = None, budget_per_1k: float | None = None,
              max_cost: float | None = None, costs: dict[str, float] | None = None,
              budget: float | None = None, max_params_b: float | None = None) -> list[RouteDecision]:
        """The LLM to ask for each text, as `POST /v1/route` answers: per text a `RouteDecision`
        (a plain dict): `chosen`, `p_correct`, `ranking`, `scores` (the best `top_k` allowed
        LLMs; None: all), `policy`, `difficulty`, `nearest_benchmark`, `expected_cost` (USD).

        `policy`: `tuned` (chosen on validation when the space was trained), `most_likely`, or a
        cost policy: `cost_weighted` (p - cost_weight x cost), `cheapest_within_margin`,
        `quality_target` (the cheapest LLM whose p reaches `target_p`, or `target_share` x the
        best p) or `budget` (spend `budget_per_1k` USD per 1,000 queries on average). Cost
        policies need prices: `prices` (a price table file, see routing.prices; default: those
        stored when the space was trained with `prices=`) or `usd_per_call` ({LLM: USD per call}).
        `candidates`: the LLMs allowed (a list of names or globs, one glob such as "*Mistral*",
        or {"names": ..., "max_params_b": ...}); `max_params_b`: only LLMs of known size up to that
        many billion parameters; `min_p`: allow only LLMs whose p reaches it; `max_cost`: drop
        LLMs costing more USD per call. `costs` and `budget` are the old names of
        `usd_per_call` and `max_cost`."""
        usd_per_call = take(usd_per_call, costs, "costs", "usd_per_call", "Space.route")
        max_cost = take(max_cost, budget, "budget", "max_cost", "Space.route")
        texts = checked_texts(texts, "route")
        if candidates is not None and not isinstance(candidates, (str, dict)):
            candidates = list(candidates)
        return self.router(usd_per_call, prices).route(
            self.embed(texts), texts=texts, policy=policy, candidates=candidates, max_params_b=max_params_b,
            top_k=top_k, cost_weight=cost_weight, margin=margin, max_cost=max_cost, min_p=min_p, target_p=target_p,
            target_share=target_share, budget_per_1k=budget_per_1k)

    def similar(self, name: str, k: int = 10, *, by: str = "agreement") -> pd.DataFrame:
        """The `k` LLMs that answer most like LLM `name` (its twins, in a zoo of fine-tunes and
        merges): columns llm, agreement (the share of the questions both answered where their
        labels match; NaN under 20 shared), shared, cosine (of their vectors, averaged over
        members), params_b; ordered by `by` ("agreement", or "cosine")."""
        from ..zoo.similar import similar
        return similar(self, name, k, by)

    def learner(self, **settings) -> "Learner":
        """A router over this space that learns from the graded outcomes of its decisions, exploring
        within a budget and recording each decision's propensity (`jeirt_ray.api.learner.Learner`;
        settings default to those chosen on validation)."""
        from .learner import Learner
        return Learner(self, **settings)

    def onboard(self, name: str, questions: Sequence[str], labels: Sequence[float], *, replace: bool = False,
                holdout: float = 0.2, seed: int = 0,
                price_usd_per_mtok: tuple[float, float] | None = None, params_b: float | None = None) -> "Space":
        """A new Space with LLM `name` fitted from its `labels` (in [0, 1]) on `questions`: each a
        question id of the space's training questions or a question text. Everything else stays
        frozen; this space is unchanged. An LLM the space already has is refitted only with
        `replace=True`. The fit's report is in `new.metadata["onboarded"][name]`. With its
        `price_usd_per_mtok` (input, output), the router prices it as given (else: as the dearest
        LLM). `params_b`: its size in billions of parameters (for size filters)."""
        from ..model.onboarding import onboard
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"Space.onboard: name must be a non-empty string, got {name!r}")
        if name in self.model_names and not replace:
            raise ValueError(f"Space.onboard: the space already has an LLM named {name!r}; pass replace=True to "
                             f"refit its vector, or choose another name")
        price = price_pair(price_usd_per_mtok)
        for arg, value in (("questions", questions), ("labels", labels)):
            if isinstance(value, (str, bytes)):
                raise TypeError(f"Space.onboard: {arg} must be a list, e.g. [{value!r}], not a string")
        questions = [str(q) for q in questions]
        try:
            labels = np.asarray(list(labels), dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("Space.onboard: labels must be numbers in [0, 1]") from None
        if len(questions) != len(labels):
            raise ValueError(f"Space.onboard: {len(questions)} questions but {len(labels)} labels")
        if not len(questions):
            raise ValueError("Space.onboard: no responses to onboard from")
        seen: dict[str, int] = {}
        for i, q in enumerate(questions):
            if seen.setdefault(q, i) != i:
                raise ValueError(f"Space.onboard: question {q[:80]!r} is given twice (at {seen[q]} and {i}); give "
                                 f"each question once, with one label (a mean of several grades is fine)")
        if ((labels < 0) | (labels > 1) | np.isnan(labels)).any():
            bad = int(np.flatnonzero((labels < 0) | (labels > 1) | np.isnan(labels))[0])
            raise ValueError(f"Space.onboard: label {bad} is {float(labels[bad])!r}; labels must lie in [0, 1]")
        pos = {q: i for i, q in enumerate(self.question_ids)} if self.question_embeddings is not None else {}
        texts = [q for q in questions if q not in pos]
        vectors = iter(self.embed(texts)) if texts else iter(())
        x = np.stack([self.question_embeddings[pos[q]] if q in pos else next(vectors) for q in questions])
        if params_b is not None and (isinstance(params_b, bool) or not isinstance(params_b, (int, float))
                                     or not np.isfinite(params_b) or params_b < 0):
            raise ValueError(f"Space.onboard: params_b must be a size in billions of parameters, not {params_b!r}")
        known = [i for i, q in enumerate(questions) if q in pos]
        row = answer_table(1, len(self.question_ids), np.zeros(len(known), dtype=np.int64),
                           np.array([pos[questions[i]] for i in known], dtype=np.int64), labels[known])
        new = Space.from_core(onboard(self, name, x, labels, holdout=holdout, seed=seed).space)
        if new.answers is not None and row is not None:
            new.answers[new.model_names.index(name)] = row[0]
        record_onboarded(new, name, price)
        if params_b is not None:
            record_size(new.metadata, name, params_b)
        return new

    def plan(self, name: str, answered: dict[str, float] | None = None, k: int = DEFAULT_BATCH, *,
             purpose: str = DEFAULT_PURPOSE, strategy: str | None = None, benchmarks: Sequence[str] | None = None,
             target_width: float = DEFAULT_TARGET_WIDTH, price_usd_per_mtok: tuple[float, float] | None = None,
             max_usd: float | None = None, adaptive: bool | None = None, budget_usd: float | None = None) -> dict:
        """The next `k` of the space's questions to ask a new LLM `name`, given its graded answers
        so far ({question id: label in [0, 1]}), as `POST /v1/onboard/plan` answers: `questions`
        (question_id, benchmark, gain, cost_usd), `predicted` (its accuracy overall and per
        benchmark, with 90% intervals that hold the space's own error, and each interval's
        `vector_width`, the part more answers narrow), `interval_width` and `stop` (the vector's
        part narrower than `target_width`: ask no more). `purpose` ("route", "estimate" or "both")
        picks how the questions are chosen unless `strategy` names one ("adaptive", "mixed",
        "random", "stratified", "weighted", "anchored"; model/onboarding_defaults.py: estimating
        takes the space's anchor questions where it keeps hundreds of known LLMs' answers). With
        the new LLM's `price_usd_per_mtok` (input, output), each question's cost is estimated
        (`routing.prices.question_costs_of`) and the most telling questions per dollar are chosen,
        within `max_usd` when given. `adaptive` and `budget_usd` are the old names of `strategy`
        and `max_usd`."""
        from ..model.adaptive import plan
        max_usd = take(max_usd, budget_usd, "budget_usd", "max_usd", "Space.plan")
        if adaptive is not None:
            deprecated("adaptive", "strategy", "Space.plan")
            strategy = "adaptive" if adaptive else "random"
        prices = price_pair(price_usd_per_mtok)
        if max_usd is not None and prices is None:
            raise ValueError("Space.plan: max_usd needs price_usd_per_mtok (the new LLM's prices)")
        return plan(self, name, dict(answered or {}), k, strategy=strategy, purpose=purpose,
                    benchmarks=list(benchmarks) if benchmarks else None, target_width=target_width,
                    costs=question_costs_of(self, prices), max_usd=max_usd).to_dict()


PricesLike = Union[str, Path, PriceTable, None]


def _llm_prices(prices: PricesLike, models: list[str]) -> LLMPrices | None:
    """A price table (file or object) resolved for `models` (the others by the labelled fallbacks)."""
    if prices is None:
        return None
    table = prices if isinstance(prices, PriceTable) else PriceTable.read(prices)
    resolved = resolve_prices(models, table)
    log.info("%s", resolved.summary())
    return resolved


class Registry(SpaceRegistry):
    """The MLflow registry of spaces: `register`, `promote`, `load`, `list` (default tracking URI:
    MLFLOW_TRACKING_URI, else a SQLite database under $JEIRT_HOME)."""

    def load(self, uri: str) -> Space:
        """`models:/<name>@<alias>` or `models:/<name>/<version>` -> the Space."""
        return Space.load(self.download(uri))

    def list(self, name: str) -> list[dict]:
        """Every version of `name`, newest first: version, aliases, tags, source."""
        return self.versions(name)
