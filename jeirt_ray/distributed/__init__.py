"""The Ray layer: thin wrappers that run the plain core on a Ray cluster."""

import os


class RayUnavailable(RuntimeError):
    """No Ray cluster to join, or a local one cannot start."""


def init_ray(**kwargs) -> None:
    """Join the cluster at RAY_ADDRESS, or start a fresh local one (never attaches to a stranger's
    local cluster by accident: address "local" always starts a new instance). Under the CLI, Ray's
    own lines go to the command's log file (jeirt_ray.logs)."""
    import ray

    from .. import logs
    logs.capture_libraries()
    if not ray.is_initialized():
        logs.divert_native_stderr()
        address = os.environ.get("RAY_ADDRESS", "local")
        try:
            ray.init(address=address, **{**logs.ray_init_kwargs(), **kwargs})
        except (ConnectionError, RuntimeError, TimeoutError) as e:
            fix = ("unset RAY_ADDRESS to start a local Ray instead, or start the cluster" if address != "local"
                   else "check free memory and /tmp space; `ray stop` ends a stale local instance")
            raise RayUnavailable(f"cannot start or join Ray at {address!r} ({str(e).splitlines()[0][:200]}): "
                                 f"{fix}") from e
        logs.capture_libraries()  # loggers that ray.init created
        if logs.State.file is not None and not logs.State.verbose:
            print(f"Ray's and the libraries' log lines: {logs.State.file} (--verbose shows them here)", flush=True)
