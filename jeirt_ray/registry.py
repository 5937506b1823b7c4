"""The MLflow model registry for trained spaces.

A registered version is a run's `space/` artifact folder (weights.safetensors + space.json,
never a pickle) with the run's metrics and the data fingerprint as tags; aliases such as
`@champion` and `@candidate` point at versions. Default tracking URI: a SQLite database under
$JEIRT_HOME (MLflow refuses the old file store), overridden by MLFLOW_TRACKING_URI.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from . import paths
from .model.space import Space

EXPERIMENT = "jeirt"
_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(paths.home() / 'mlflow.db').resolve()}"


class Registry:
    def __init__(self, tracking_uri: str | None = None):
        import mlflow
        from mlflow import MlflowClient

        self.mlflow = mlflow
        self.tracking_uri = tracking_uri or default_tracking_uri()
        if self.tracking_uri.startswith("sqlite:///"):
            Path(self.tracking_uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(self.tracking_uri)
        self.client = MlflowClient(self.tracking_uri)

    def experiment_id(self, name: str = EXPERIMENT) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        if self.tracking_uri.startswith(("http://", "https://", "databricks")):
            return self.client.create_experiment(name)  # the server decides (e.g. --serve-artifacts)
        # a local store: an explicit artifact location (MLflow's default is ./mlruns of whatever
        # the working directory is)
        artifacts = (paths.home() / "mlartifacts").resolve()
        return self.client.create_experiment(name, artifact_location=artifacts.as_uri())

    def new_run(self, run_name: str, parent_run_id: str | None = None) -> str:
        """Create a run (nested under `parent_run_id` if given) that training can log into before
        `register` ends it; returns its id."""
        tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else None
        return self.client.create_run(self.experiment_id(), run_name=run_name, tags=tags).info.run_id

    def register(self, space: Space, name: str, metrics: dict[str, float] | None = None,
                 run_id: str | None = None) -> int:
        """Log the space as a run (a new one, or `run_id` from `new_run`) and register it as a
        new version of `name`."""
        from mlflow.entities import Metric, Param, RunTag

        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        # the client API, not mlflow.start_run: no process-wide active run or experiment to clash
        # with whatever else this process logged
        if run_id is None:
            run_id = self.client.create_run(self.experiment_id(), run_name=f"register-{name}").info.run_id
        params = {f"config.{k}": v for k, v in space.config.model_dump().items()}
        params |= {"encoder_id": space.encoder_id, "n_models": len(space.model_names), "members": len(space.members)}
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                              params=[Param(k, str(v)) for k, v in params.items()],
                              tags=[RunTag("data_fingerprint", space.metadata.get("data_fingerprint", "unknown"))])
        with tempfile.TemporaryDirectory() as tmp:
            self.client.log_artifacts(run_id, str(space.save(Path(tmp) / "space")), artifact_path="space")
        self.client.set_terminated(run_id)
        run = self.client.get_run(run_id)
        try:
            self.client.get_registered_model(name)
        except Exception:
            self.client.create_registered_model(name)
        tags = {"encoder_id": space.encoder_id, "data_fingerprint": space.metadata.get("data_fingerprint", "unknown"),
                "own_encoder": str(space.encoder_dir is not None).lower(),
                **{f"metric.{k}": f"{v:.6g}" for k, v in metrics.items()}}
        version = self.client.create_model_version(name, source=f"{run.info.artifact_uri}/space",
                                                   run_id=run.info.run_id, tags=tags)
        return int(version.version)

    def promote(self, name: str, version: int, alias: str = "champion") -> None:
        self.resolve(f"models:/{name}/{version}")  # a LookupError naming the fix on an unknown version
        self.client.set_registered_model_alias(name, alias, str(version))

    def _model(self, name: str):
        from mlflow.exceptions import MlflowException
        try:
            return self.client.get_registered_model(name)
        except MlflowException:
            fix = "run `make demo`, or " if name == "demo" else ""
            raise LookupError(f"no registered space named {name!r} in {self.tracking_uri}: {fix}register one with "
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
            raise LookupError(f"{uri} does not resolve in {self.tracking_uri}: {fix}") from None

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

    def download_encoder(self, uri: str) -> Path:
        """The local folder of the encoder saved with the space at `uri`."""
        version = self._with_own_encoder(uri)
        try:
            return Path(self.mlflow.artifacts.download_artifacts(artifact_uri=f"{version.source}/encoder"))
        except Exception as e:
            raise LookupError(f"cannot download the encoder of {uri} from {self.tracking_uri}: {e}") from e

    def download(self, uri: str) -> Path:
        """The local folder of the space that `models:/<name>@<alias>` or `models:/<name>/<n>`
        points at (downloaded from the artifact store)."""
        version = self.resolve(uri)
        try:
            return Path(self.mlflow.artifacts.download_artifacts(artifact_uri=version.source))
        except Exception as e:
            raise LookupError(f"cannot load {uri} from the registry at {self.tracking_uri}: {e}") from e

    def load(self, uri: str) -> Space:
        """`models:/<name>@<alias>` or `models:/<name>/<version>` -> the saved Space."""
        return Space.load(self.download(uri))
