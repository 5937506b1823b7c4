"""The Ray layer: thin wrappers that run the plain core on a Ray cluster."""

import os


def init_ray(**kwargs) -> None:
    """Join the cluster at RAY_ADDRESS, or start a fresh local one (never attaches to a stranger's
    local cluster by accident: address "local" always starts a new instance)."""
    import ray
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "local"), **kwargs)
