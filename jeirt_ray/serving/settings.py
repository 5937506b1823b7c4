"""The typed settings of the Serve application: `args` (fixed when the application is built) and
each deployment's `user_config` (live, applied without a redeploy). Unknown keys are errors, so
a typo in a Serve config is one line before anything deploys, not a setting silently ignored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..encoders import DEFAULT_ENCODER
from ..routing.router import PolicyName


class AppArgs(BaseModel):
    """The application's `args` (jeirt_ray.serving.app:build_app)."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, description="the registered space, served as models:/<model>@<alias>")
    encoder: str = Field(DEFAULT_ENCODER, description="the encoder the space was trained on, or models:/NAME@ALIAS "
                                                      "for the fine-tuned encoder saved with a registered space")
    encoder_threads: int | None = Field(None, ge=1, description="torch threads per encoder")
    encoder_placement: Literal["deployment", "router"] = Field(
        "deployment", description="deployment: an Encoder deployment of its own (scaled apart, e.g. on GPUs); "
                                  "router: inside each Router replica (one process hop less, for one machine)")
    tracking_uri: str | None = Field(None, description="MLflow; default MLFLOW_TRACKING_URI or $JEIRT_HOME/mlflow.db")


class RouterConfig(BaseModel):
    """The Router's `user_config`."""

    model_config = ConfigDict(extra="forbid")
    alias: str = Field("champion", min_length=1, description="the registry alias served")
    default_policy: PolicyName = "tuned"
    costs: dict[str, float] | None = Field(None, description="{LLM: price per call}; enables the cost policies")
    refresh_s: float = Field(5.0, gt=0, description="how often the alias is re-resolved")
    upstreams: dict[str, str] | None = Field(None, description="{LLM: OpenAI-compatible base URL} for "
                                                               "/v1/chat/completions")


class OnboarderConfig(BaseModel):
    """The Onboarder's `user_config`."""

    model_config = ConfigDict(extra="forbid")
    alias: str = Field("champion", min_length=1, description="the alias a promoting onboarding moves")


USER_CONFIGS = {"Router": RouterConfig, "Onboarder": OnboarderConfig}


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
            if d.name != "Encoder":
                raise ValueError(f"{where}: unknown deployment {d.name!r}; expected Router, Onboarder or Encoder")
            continue
        try:
            schema.model_validate(d.user_config or {})
        except ValidationError as e:
            raise ValueError(first_error(e, f"{where} deployment {d.name} user_config")) from None
