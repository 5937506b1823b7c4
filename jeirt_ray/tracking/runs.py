"""MLflow experiment tracking, the one place that logs runs: runs (nested under a parent),
metrics (with epochs as steps), params, dicts and artifacts, through MLflow's client API (no
process-wide active run to clash with whatever else a process logs). The registry of spaces
(registry.py) builds on it.

Default tracking URI: MLFLOW_TRACKING_URI, else a SQLite database under $JEIRT_HOME (MLflow
refuses the old file store); local stores get an explicit artifact location.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..core import paths

EXPERIMENT = "jeirt"
BATCH = 900  # MLflow takes at most 1000 entities a batch


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(paths.home() / 'mlflow.db').resolve()}"


class Tracker:
    def __init__(self, tracking_uri: str | None = None):
        import mlflow
        from mlflow import MlflowClient

        self.mlflow = mlflow
        self.tracking_uri = tracking_uri or default_tracking_uri()
        if self.tracking_uri.startswith("sqlite:///"):
            Path(self.tracking_uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(self.tracking_uri)

    def experiment_id(self, name: str = EXPERIMENT) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        # a server decides the artifact location (e.g. --serve-artifacts); a local store gets an
        # explicit one (MLflow's default is ./mlruns of whatever the working directory is)
        remote = self.tracking_uri.startswith(("http://", "https://", "databricks"))
        location = None if remote else (paths.home() / "mlartifacts").resolve().as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except Exception:  # another process created it meanwhile (two trainings starting at once)
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def new_run(self, run_name: str, parent_run_id: str | None = None, experiment: str = EXPERIMENT) -> str:
        """Create a run (nested under `parent_run_id` if given, in the parent's experiment);
        returns its id."""
        tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else None
        exp = self.client.get_run(parent_run_id).info.experiment_id if parent_run_id else self.experiment_id(experiment)
        return self.client.create_run(exp, run_name=run_name, tags=tags).info.run_id

    def log(self, run_id: str, metrics: dict[str, float] | None = None, params: dict | None = None,
            tags: dict[str, str] | None = None, history: list[dict] | None = None, prefix: str = "") -> None:
        """Metrics (step 0), `history` rows ({"epoch": n, name: value, ...}: one step per epoch),
        params and tags of a run, in batches."""
        from mlflow.entities import Metric, Param, RunTag
        now = int(time.time() * 1000)
        entries = [Metric(f"{prefix}{k}", float(v), now, 0) for k, v in (metrics or {}).items()]
        entries += [Metric(f"{prefix}{k}", float(v), now, int(row["epoch"])) for row in history or ()
                    for k, v in row.items() if k != "epoch"]
        params = [Param(k, str(v)) for k, v in (params or {}).items()]
        tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for i in range(0, max(len(entries), 1), BATCH):
            first = i == 0
            self.client.log_batch(run_id, metrics=entries[i:i + BATCH], params=params if first else [],
                                  tags=tags if first else [])

    def log_dict(self, run_id: str, obj: dict, name: str) -> None:
        self.client.log_dict(run_id, obj, name)

    def log_artifacts(self, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
        """A file or a folder's files as artifacts of the run."""
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path=artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path=artifact_path)

    def end_run(self, run_id: str, failed: bool = False) -> None:
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
