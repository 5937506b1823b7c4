import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SHARED_DATA = Path(os.environ.get("JEIRT_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def shared_dataset(name: str) -> Path:
    """Path of a real dataset in ../shared/data, or skip the test saying why."""
    path = SHARED_DATA / name
    if not (path / "responses.csv.gz").exists():
        pytest.skip(f"real dataset {name!r} not found at {path.resolve()} (set JEIRT_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def synthetic():
    from jeirt_ray.data.synthetic import generate
    return generate(n_models=16, n_questions=600, seed=0)
