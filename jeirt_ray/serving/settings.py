"""The typed settings of the Serve application: `args` (fixed when the application is built) and
each deployment's `user_config` (live, applied without a redeploy). Unknown keys are errors, so
a typo in a Serve config is one line before anything deploys, not a setting silently ignored."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.renamed import renamed_fields
from ..learning.online import LOOP_DEFAULTS
from ..routing.decisions import PolicyName


SPACE_ENCODER = "space"  # args.encoder: the served space's own


class AppArgs(BaseModel):
    """The application's `args` (jeirt_ray.serving.app:build_app)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: str = Field(min_length=1, description="the registered space, served as models:/<model>@<alias>")
    encoder: str = Field(SPACE_ENCODER, min_length=1, description=(
        "space: the encoder the served space was trained on (its own fine-tuned one where it carries one; read "
        "from the registry: jeirt serve reads the Router's alias, other deploys @champion); or that encoder's "
        "name (e.g. all-MiniLM-L6-v2, hashing), or models:/NAME@ALIAS for the fine-tuned encoder saved with a "
        "registered space"))
    encoder_threads: int | None = Field(None, ge=1, description="torch threads per encoder")
    encoder_placement: Literal["deployment", "router"] = Field(
        "deployment", description="deployment: an Encoder deployment of its own (scaled apart, e.g. on GPUs); "
                                  "router: inside each Router replica (one process hop less, for one machine)")
    tracking_uri: str | None = Field(None, description="MLflow; default MLFLOW_TRACKING_URI or $JEIRT_HOME/mlflow.db")
    auth: Literal["open", "required"] = Field(
        "required", description="required: every route but /health and the docs needs an API key; open (loopback "
                                "hosts only): route, chat, feedback and explore need none")
    keys_url: str | None = Field(None, description="the API keys' database (SQLAlchemy URL); default JEIRT_KEYS_URL "
                                                   "or SQLite at $JEIRT_HOME/keys.db")


class Upstream(BaseModel):
    """Where the gateway sends an LLM's chat completions: an OpenAI-compatible base URL (vLLM, TGI,
    llama.cpp's server, Ollama, a hosted API)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    url: str = Field(pattern=r"^https?://", description="base URL; the gateway posts to <url>/chat/completions")
    model: str | None = Field(None, description="the model name the upstream expects (default: the LLM's name)")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                    description="environment variable holding the upstream's API key (sent as a "
                                                "bearer token; never logged)")
    connect_timeout_s: float | None = Field(None, gt=0, description="default: the gateway's")
    read_timeout_s: float | None = Field(None, gt=0, description="to the first byte and between bytes; default: "
                                                                 "the gateway's")


class GatewayConfig(BaseModel):
    """How /v1/chat/completions calls upstreams."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    max_tries: int = Field(3, ge=1, le=20, description="LLMs tried per request: the chosen one, then the next "
                                                       "best by the same policy, on a connection error, a timeout "
                                                       "or a 5xx before the first byte")
    connect_timeout_s: float = Field(3.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)
    try_deadline_s: float = Field(300.0, gt=0, description="the most one upstream try may take, to its whole "
                                                           "answer (to the first byte when streamed)")
    request_deadline_s: float = Field(600.0, gt=0, description="the most all tries of one request may take")
    stream_max_s: float = Field(1800.0, gt=0, description="the longest a streamed answer may run; then it is cut "
                                                          "with an error event")
    max_answer_bytes: int = Field(16 * 2**20, ge=1024, description="the largest non-streamed upstream answer read")
    cooldown_s: float = Field(15.0, ge=0, description="an upstream that failed is tried last for this long")
    sticky_ttl_s: float = Field(3600.0, gt=0, description="how long a conversation keeps its LLM")
    sticky_max: int = Field(100_000, ge=1, description="conversations remembered per replica")


class PriceRow(BaseModel):
    """One LLM's price, USD per million tokens."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)


class DecisionsConfig(BaseModel):
    """The decision log (feedback/log.py) and where feedback on it is kept."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(True, description="log every routed query (an id per request either way)")
    path: str | None = Field(None, min_length=1, description="a folder or a URI pyarrow reaches (s3://bucket/prefix); "
                                                            "default $JEIRT_HOME/decisions")
    log_queries: Literal["none", "embedding", "text"] = Field(
        "embedding", description="what of a query is kept: nothing, the encoder's vector (what learning needs), or "
                                 "the vector and the text")
    log_answers: Literal["none", "text"] = Field("none", description="keep the upstream's answer text")
    log_candidates: int | None = Field(256, ge=1, description="the P(correct) kept per decision: of the allowed "
                                                              "LLMs with the highest, at most this many, and always "
                                                              "those of the policy's ranking (null: every allowed "
                                                              "LLM; a space of thousands makes that slow and large)")
    flush_s: float = Field(1.0, gt=0, le=300, description="the buffer is written at least this often: a replica "
                                                          "that dies loses at most this much of its log")
    flush_rows: int = Field(1000, ge=1, le=1_000_000, description="and whenever it holds this many rows")
    max_pending: int = Field(100_000, ge=1, description="rows buffered while writes fail; more are dropped and "
                                                        "counted (jeirt_decisions_dropped)")
    max_pending_mb: float = Field(256.0, gt=0, description="and at most about this many MiB of them (query texts, "
                                                           "answers and vectors)")
    retention_days: float = Field(30.0, gt=0, description="older days are deleted; feedback on them is a 404")
    feedback_url: str | None = Field(None, description="the feedback database (SQLAlchemy URL); default "
                                                       "JEIRT_FEEDBACK_URL or SQLite at $JEIRT_HOME/feedback.db")

    def log_settings(self):
        from ..feedback.log import LogSettings
        return LogSettings(self.path, self.log_queries, self.log_answers, self.flush_s, self.flush_rows,
                           self.max_pending, self.max_pending_mb, self.retention_days)


class LearningConfig(BaseModel):
    """Learning from the feedback on this service's decisions (serving/loop/learned.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(False, description="apply the feedback store's grades to the LLMs' vectors; every policy "
                                             "then reads the learned P(correct)")
    poll_s: float = Field(2.0, gt=0, le=300, description="how often each replica reads new feedback (every replica "
                                                         "holds the same state within this)")
    prior_var: float = Field(LOOP_DEFAULTS["prior_var"], gt=0, description="how far feedback may move a vector "
                                                                           "(chosen on validation)")
    residual_var: float = Field(LOOP_DEFAULTS["residual_var"], ge=0, description="a per-LLM correction linear in the query's encoder vector "
                                                       "(0: none)")
    evidence: float = Field(LOOP_DEFAULTS["evidence"], ge=0, description="the training questions' weight in the prior")
    explore: float = Field(0.0, ge=0, le=1, description="the share of queries on which the request's policy "
                                                        "chooses with P(correct) drawn from the learned posterior "
                                                        "(Thompson sampling; each decision logs its propensity)")
    explore_usd_per_1k: float | None = Field(None, ge=0, description="exploring pauses while what it added to the "
                                                                     "expected cost exceeds this many USD per 1,000 "
                                                                     "queries (per replica)")

    @model_validator(mode="after")
    def _explore_needs_learning(self):
        if self.explore > 0 and not self.enabled:
            raise ValueError("explore needs learning: set enabled: true (exploring without learning from the "
                             "outcomes only costs)")
        return self


class ShadowConfig(BaseModel):
    """A challenger routing a share of the requests beside the served space, never acted on
    (serving/loop/shadow.py): its decisions logged for `jeirt shadow` to compare on the graded traffic."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    alias: str = Field("challenger", min_length=1, description="the registry alias of the shadow space")
    share: float = Field(0.0, ge=0, le=1, description="the share of requests it also routes (0: off)")


class RouterConfig(BaseModel):
    """The Router's `user_config`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    alias: str = Field("champion", min_length=1, description="the registry alias served")
    default_policy: PolicyName = "tuned"
    usd_per_call: dict[str, float] | None = Field(None, description="{LLM: USD per call, whatever the query} "
                                                  "(old name: costs); enables the cost policies; key budgets charge "
                                                  "it as USD")
    prices: str | dict[str, PriceRow] | None = Field(
        None, description="a price table file (CSV, YAML or JSON, USD per million tokens) or {LLM: {input_usd_per_mtok, "
                          "output_usd_per_mtok}}; default: the prices stored with the space. Enables the cost "
                          "policies")
    refresh_s: float = Field(5.0, gt=0, description="how often the alias is re-resolved")
    encoder_batch_wait_s: float = Field(
        0.0, ge=0, le=1, description="with the encoder inside the Router (encoder_placement: router): how long a "
                                     "query waits for others to share its encoder call; 0 batches only the queries "
                                     "that queued while the encoder was busy (benchmarks/batch_wait.py); an encoder "
                                     "cheaper than a thread hop (the hashing one) encodes each query at once, "
                                     "unbatched")
    upstreams: dict[str, str | Upstream] | None = Field(
        None, description="{LLM: OpenAI-compatible base URL, or an Upstream} for /v1/chat/completions")
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    decisions: DecisionsConfig = Field(default_factory=DecisionsConfig)
    learning: LearningConfig = Field(default_factory=LearningConfig)
    shadow: ShadowConfig = Field(default_factory=ShadowConfig)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        return renamed_fields(data, {"costs": "usd_per_call"}, "the Router's user_config")

    @field_validator("upstreams")
    @classmethod
    def _upstream_urls(cls, upstreams):
        for llm, u in (upstreams or {}).items():
            if isinstance(u, str) and not re.match(r"^https?://", u):
                raise ValueError(f"upstream of {llm!r}: {u!r} is not an http:// or https:// URL")
        return upstreams

    @field_validator("prices")
    @classmethod
    def _price_file_exists(cls, prices):
        if isinstance(prices, str) and not Path(prices).expanduser().is_file():
            raise ValueError(f"the price table {prices!r} does not exist (a CSV, YAML or JSON file)")
        return prices

    @model_validator(mode="after")
    def _shadow_needs_the_log(self):
        if self.shadow.share > 0 and not self.decisions.enabled:
            raise ValueError("shadow needs the decision log: its decisions are compared with the logged ones "
                             "(set decisions.enabled: true)")
        if self.shadow.share > 0 and self.shadow.alias == self.alias:
            raise ValueError(f"shadow.alias {self.shadow.alias!r} is the alias served: name the challenger's")
        return self

    def price_table(self):
        """The configured prices as a routing.prices.PriceTable (None: the space's own)."""
        from ..routing.prices import PriceTable
        if self.prices is None:
            return None
        if isinstance(self.prices, str):
            return PriceTable.read(self.prices)
        return PriceTable.from_rows([{"model": m, **r.model_dump()} for m, r in self.prices.items()], "user_config.prices")

    def upstream(self, llm: str) -> Upstream | None:
        u = (self.upstreams or {}).get(llm)
        return Upstream(url=u) if isinstance(u, str) else u


class OnboarderConfig(BaseModel):
    """The Onboarder's `user_config`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    alias: str = Field("champion", min_length=1, description="the alias a promoting onboarding moves")


class EncoderConfig(BaseModel):
    """The Encoder deployment's `user_config` (encoder_placement: deployment)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    batch_wait_s: float = Field(0.0, ge=0, le=1, description="how long a query waits for others to share its "
                                                             "encoder call (as the Router's encoder_batch_wait_s)")


USER_CONFIGS = {"Router": RouterConfig, "Onboarder": OnboarderConfig, "Encoder": EncoderConfig}


def first_error(e: ValidationError, where: str) -> str:
    """One line naming the first bad key and why."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{where}{'.' + loc if loc else ''}: {err['msg']}" + (f" ({len(e.errors())} problems)"
                                                                 if len(e.errors()) > 1 else "")


def check_application(app) -> None:
    """An application of a ServeDeploySchema: its args and every known deployment's user_config
    validate, or a ValueError names the first bad key."""
    where = f"application {app.name!r}"
    try:
        AppArgs.model_validate(app.args or {})
    except ValidationError as e:
        raise ValueError(first_error(e, f"{where} args")) from None
    for d in app.deployments:
        schema = USER_CONFIGS.get(d.name)
        if schema is None:
            raise ValueError(f"{where}: unknown deployment {d.name!r}; expected Router, Onboarder or Encoder")
        try:
            schema.model_validate(d.user_config if isinstance(d.user_config, dict) else {})  # unset: Serve's DEFAULT
        except ValidationError as e:
            raise ValueError(first_error(e, f"{where} deployment {d.name} user_config")) from None
