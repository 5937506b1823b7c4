"""The MLflow model registry for trained spaces.

A registered version is a run's `space/` artifact folder (weights.safetensors + space.json,
never a pickle) with the run's metrics and the data fingerprint as tags; aliases such as
`@champion` and `@candidate` point at versions. Default tracking URI: a SQLite database under
$JEIRT_HOME (MLflow refuses the old file store), overridden by MLFLOW_TRACKING_URI.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..core.secrets import redact
from ..model.space import CoreSpace
from .runs import Tracker, default_tracking_uri

__all__ = ["SpaceRegistry", "default_tracking_uri", "unreachable"]

_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")


class AliasMoved(LookupError):
    """An alias moved between reading it and promoting over it (compare-and-set failed)."""


def unreachable(error: BaseException) -> bool:
    """Whether `error` (or what caused it) says the registry could not be reached at all (no
    connection, a timeout, retries exhausted), rather than that it answered no."""
    import requests
    seen = error
    while seen is not None:
        if isinstance(seen, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
            return True
        text = str(seen)
        if any(s in text for s in ("Max retries exceeded", "Connection refused", "Failed to establish a new connection",
                                   "Read timed out", "RemoteDisconnected", "could not connect to server")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def bound_http_retries() -> None:
    """MLflow retries a failed HTTP call 7 times with backoff (minutes in all): a service that
    must answer 503 while the tracking server is down asks at most twice, 15 s each, unless the
    environment says otherwise."""
    import os
    for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"), ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")):
        os.environ.setdefault(name, value)


class SpaceRegistry(Tracker):
    """Spaces as registered model versions, on the MLflow store at `tracking_uri`."""

    @property
    def where(self) -> str:
        """The tracking URI as messages may show it: without credentials."""
        return redact(str(self.tracking_uri))

    def register(self, space: CoreSpace, name: str, metrics: dict[str, float] | None = None,
                 run_id: str | None = None) -> int:
        """Log the space as a run (a new one, or `run_id` from `new_run`) and register it as a
        new version of `name`."""
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        if run_id is None:
            run_id = self.new_run(f"register-{name}")
        params = {f"config.{k}": v for k, v in space.config.model_dump().items()}
        params |= {"encoder_id": space.encoder_id, "n_models": len(space.model_names), "members": len(space.members)}
        self.log(run_id, metrics, params, tags={"data_fingerprint": space.metadata.get("data_fingerprint", "unknown")})
        with tempfile.TemporaryDirectory() as tmp:
            self.log_artifacts(run_id, space.save(Path(tmp) / "space"), artifact_path="space")
        self.end_run(run_id)
        run = self.client.get_run(run_id)
        try:
            self.client.get_registered_model(name)
        except Exception:
            try:
                self.client.create_registered_model(name)
            except Exception:  # another registration created it meanwhile
                self.client.get_registered_model(name)
        tags = {"encoder_id": space.encoder_id, "data_fingerprint": space.metadata.get("data_fingerprint", "unknown"),
                "own_encoder": str(space.encoder_dir is not None).lower(),
                **{f"metric.{k}": f"{v:.6g}" for k, v in metrics.items()}}
        version = self.client.create_model_version(name, source=f"{run.info.artifact_uri}/space",
                                                   run_id=run.info.run_id, tags=tags)
        return int(version.version)

    def promote(self, name: str, version: int, alias: str = "champion", expected: int | None = None) -> None:
        """Point `name@alias` at `version`. With `expected` (compare-and-set): only while the alias
        still points at that version (re-read just before the move), else AliasMoved and nothing
        changes, so a version built on what the alias served never replaces a newer one (an LLM
        onboarded meanwhile would vanish from serving). MLflow has no atomic swap: the window left
        is that of two calls, not of the build."""
        self.resolve(f"models:/{name}/{version}")  # a LookupError naming the fix on an unknown version
        if expected is not None:
            now = self.alias_version(name, alias)
            if now != int(expected):
                raise AliasMoved(f"{name}@{alias} moved from version {expected} to {now} meanwhile; version "
                                 f"{version} was registered but not promoted: run again on what {alias} serves now")
        self.client.set_registered_model_alias(name, alias, str(version))

    def alias_version(self, name: str, alias: str) -> int | None:
        """The version `name@alias` points at, or None where the alias is not set."""
        from mlflow.exceptions import MlflowException
        try:
            return int(self.client.get_model_version_by_alias(name, alias).version)
        except MlflowException as e:
            if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE") and not unreachable(e):
                return None
            raise

    def _model(self, name: str):
        from mlflow.exceptions import MlflowException
        try:
            return self.client.get_registered_model(name)
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":  # down, or refusing: not "no such space"
                if unreachable(e):
                    raise
                raise RuntimeError(f"the registry at {self.where} answered {e.error_code}: "
                                   f"{redact(str(e.message))[:500]}") from None
            fix = "run `make demo`, or " if name == "demo" else ""
            raise LookupError(f"no registered space named {name!r} in {self.where}: {fix}register one with "
                              f"`jeirt train --data DIR --register {name} --promote champion`") from None

    def resolve(self, uri: str):
        """The model version that `models:/<name>@<alias>` or `models:/<name>/<n>` points at; a
        LookupError that names the fix when there is none."""
        from mlflow.exceptions import MlflowException
        m = _URI.match(uri)
        if not m:
            raise ValueError(f"{uri!r} is not a registry URI (expected models:/<name>@<alias> or models:/<name>/<n>)")
        self._model(m["name"])
        try:
            if m["alias"]:
                return self.client.get_model_version_by_alias(m["name"], m["alias"])
            return self.client.get_model_version(m["name"], m["version"])
        except MlflowException:
            fix = (f"`jeirt registry promote {m['name']} VERSION --alias {m['alias']}`" if m["alias"]
                   else f"`jeirt registry list {m['name']}` shows the versions")
            raise LookupError(f"{uri} does not resolve in {self.where}: {fix}") from None

    def versions(self, name: str) -> list[dict]:
        """Every version of `name`, newest first, with its aliases and metric tags."""
        aliases: dict[str, list[str]] = {}
        for alias, version in self._model(name).aliases.items():
            aliases.setdefault(str(version), []).append(alias)
        rows = [{"version": int(v.version), "aliases": sorted(aliases.get(str(v.version), [])), "tags": dict(v.tags),
                 "source": v.source} for v in self.client.search_model_versions(f"name='{name}'")]
        return sorted(rows, key=lambda r: -r["version"])

    def _with_own_encoder(self, uri: str):
        """The version `uri` points at, which must carry its own (fine-tuned) encoder; a
        LookupError naming the fix when it has none."""
        version = self.resolve(uri)
        if version.tags.get("own_encoder") != "true":
            raise LookupError(f"{uri} (version {version.version}) has no encoder of its own: it was trained on the "
                              f"shared encoder {version.tags.get('encoder_id')!r}; set args.encoder to that encoder")
        return version

    def encoder_of(self, uri: str) -> tuple[str, str]:
        """(`models:/<name>/<version>`, encoder id) of the encoder saved with the space that `uri`
        points at now."""
        version = self._with_own_encoder(uri)
        return f"models:/{_URI.match(uri)['name']}/{version.version}", version.tags["encoder_id"]

    def serving_encoder(self, uri: str) -> str:
        """What a service's `args.encoder` must be to serve the version `uri` points at: `uri`
        itself where the space carries its fine-tuned encoder, else the shared encoder it was
        trained on; a LookupError naming the fix where that cannot be loaded by name (a local
        folder's, or a version without the tag)."""
        version = self.resolve(uri)
        if version.tags.get("own_encoder") == "true":
            return uri
        encoder_id = version.tags.get("encoder_id", "")
        if encoder_id.startswith("hashing-"):
            return encoder_id
        if encoder_id.startswith("st:"):
            return encoder_id[3:]  # the name, with its precision suffix (all-MiniLM-L6-v2+int8)
        raise LookupError(f"{uri} (version {version.version}) was trained on encoder {encoder_id or 'unknown'!r}, "
                          "which cannot be loaded by name: set args.encoder to it (its folder)")

    def download_encoder(self, uri: str) -> Path:
        """The local folder of the encoder saved with the space at `uri`."""
        version = self._with_own_encoder(uri)
        try:
            return Path(self.mlflow.artifacts.download_artifacts(artifact_uri=f"{version.source}/encoder",
                                                                         tracking_uri=self.tracking_uri))
        except Exception as e:
            raise LookupError(f"cannot download the encoder of {uri} from {self.where}: {redact(str(e))}") from e

    def download(self, uri: str) -> Path:
        """The local folder of the space that `models:/<name>@<alias>` or `models:/<name>/<n>`
        points at (downloaded from the artifact store)."""
        version = self.resolve(uri)
        try:
            return Path(self.mlflow.artifacts.download_artifacts(artifact_uri=version.source,
                                                                    tracking_uri=self.tracking_uri))
        except Exception as e:
            raise LookupError(f"cannot load {uri} from the registry at {self.where}: {redact(str(e))}") from e

    def load(self, uri: str) -> CoreSpace:
        """`models:/<name>@<alias>` or `models:/<name>/<version>` -> the saved CoreSpace."""
        return CoreSpace.load(self.download(uri))
