"""The Ray layer: thin wrappers that run the plain core on a Ray cluster."""

import os


class RayUnavailable(RuntimeError):
    """No Ray cluster to join, or a local one cannot start."""


def init_ray(**kwargs) -> None:
    """Join the cluster at RAY_ADDRESS, or start a fresh local one (never attaches to a stranger's
    local cluster by accident: address "local" always starts a new instance). Under the CLI, Ray's
    own lines go to the command's log file (jeirt_ray.core.logs)."""
    import ray

    from ..core import logs
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


def quiet_tune():
    """Tune without its experiment box and per-trial tables (the old reporter honours
    verbose=0) or INFO lines; call before running a Tuner."""
    import logging
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    logging.getLogger("ray.tune").setLevel(logging.WARNING)


def trial_bar(total: int, desc: str, enabled: bool = True):
    """A Tune callback that shows finished trials as a progress bar (in place of Tune's tables)."""
    from ray import tune
    from tqdm.auto import tqdm

    class TrialBar(tune.Callback):
        # Tune pickles its callbacks with the experiment's state: the bar (a terminal stream) stays out
        bar = None

        def __getstate__(self):
            return {k: v for k, v in self.__dict__.items() if k != "bar"}

        def setup(self, **info):
            self.bar = tqdm(total=total, desc=desc, unit="trial", disable=not enabled)

        def on_trial_complete(self, iteration, trials, trial, **info):
            if self.bar is not None:
                self.bar.update(1)

        on_trial_error = on_trial_complete

        def on_experiment_end(self, trials, **info):
            if self.bar is not None:
                self.bar.close()
    return TrialBar()
