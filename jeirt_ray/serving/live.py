"""The live space of a router, a plain class (testable without Serve): it serves
`models:/<model>@<alias>`, swaps to the version the alias points at when that version loads and
fits the encoder (a bad new version never replaces a working one), keeps serving what it has
while the registry cannot be read, and, when a replica starts while the alias's own version
cannot serve, falls back to the newest registered version that can."""

from __future__ import annotations

import logging
import threading
import time

from ..core.secrets import redact
from ..model.space import CoreSpace
from ..routing.prices import resolve_prices
from ..routing.router import SpaceRouter
from .settings import RouterConfig

log = logging.getLogger("jeirt.serve")
STARTUP_WAIT_S = 300.0  # how long a starting replica waits for an unreachable registry


class RegistryUnreachable(LookupError):
    """The registry could not answer (server down, database locked)."""


class SpaceSource:
    """Loads `models:/<model>@<alias>`, and the version it points at when the alias moves."""

    def __init__(self, tracking_uri: str | None, encoder_id: str):
        from ..tracking.registry import SpaceRegistry
        self.registry = SpaceRegistry(tracking_uri)
        self.encoder_id = encoder_id
        self.version: str | None = None
        self.checked = 0.0

    def resolve(self, model: str, alias: str) -> str:
        try:
            return str(self.registry.client.get_model_version_by_alias(model, alias).version)
        except Exception as e:
            missing = getattr(e, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"  # an answer, not an outage
            raise (LookupError if missing else RegistryUnreachable)(redact(
                f"cannot resolve models:/{model}@{alias} in the registry at {self.registry.tracking_uri}: {e}")) from e

    def load(self, model: str, version: str) -> CoreSpace:
        uri = f"models:/{model}/{version}"
        space = self.registry.load(uri)
        if space.encoder_id != self.encoder_id:
            raise ValueError(f"{uri} was trained on encoder {space.encoder_id!r} but this service encodes "
                             f"with {self.encoder_id!r}")
        return space

    def changed(self, model: str, alias: str) -> tuple[str, CoreSpace] | None:
        """Look the alias up: (version, space) when it points somewhere new and that version
        loads; None when it has not moved."""
        self.checked = time.monotonic()
        version = self.resolve(model, alias)
        if version == self.version:
            return None
        space = self.load(model, version)
        self.version = version
        return version, space


class LiveSpace:
    def __init__(self, model: str, encoder_id: str, tracking_uri: str | None = None):
        self.model = model
        self.config = RouterConfig()
        self.source = SpaceSource(tracking_uri, encoder_id)
        self.core: SpaceRouter | None = None
        self.version: str | None = None
        self.registry_error: str | None = None  # why the alias's version is not the one serving, if so
        self.registry_reachable = True
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.on_serve: list = []  # called with each new SpaceRouter before it serves (serving/loop/learned.py)

    @property
    def uri(self) -> str:
        return f"models:/{self.model}@{self.config.alias}"

    def watch(self) -> threading.Thread:
        """Re-resolve the alias every `refresh_s` in a daemon thread, off the request path: a slow
        or locked registry never delays a query."""
        def loop():
            while not self.stopped.wait(self.config.refresh_s):  # read each round: configure may change it
                if self.core is not None:
                    self.refresh()
        thread = threading.Thread(target=loop, daemon=True, name="alias-watcher")
        thread.start()
        return thread

    def close(self) -> None:
        """Stop watching the alias."""
        self.stopped.set()

    def configure(self, config: RouterConfig) -> None:
        """Apply new live settings (alias, usd_per_call, default policy, upstreams). A setting that
        cannot be applied leaves the current state serving and is logged."""
        old = self.config
        self.config = config
        try:
            self._swap(force=True) if self.core is not None else self._first_load()
        except Exception as e:
            if self.core is None:
                self._fall_back(e)  # a replica starting (scale-up, restart) while the alias's version is bad
                return
            self.config = old
            log.exception("new router settings rejected; still serving %s version %s", self.uri, self.version)

    def _first_load(self, give_up_s: float = STARTUP_WAIT_S) -> None:
        """The first load of a replica: while the registry cannot be reached, wait and retry
        (1, 2, 4 ... 30 s apart), one log line each time, for at most `give_up_s`."""
        start, pause = time.monotonic(), 1.0
        while True:
            try:
                return self._swap(force=True)
            except RegistryUnreachable as e:
                if time.monotonic() - start + pause > give_up_s:
                    raise
                log.warning("the registry cannot be reached (%s); this replica retries in %.0f s", e, pause)
                self.stopped.wait(pause)
                pause = min(2 * pause, 30.0)

    def _fall_back(self, error: Exception) -> None:
        """Serve the newest registered version that loads and fits the encoder when the alias's
        own cannot (reported in /health, and the alias keeps being watched); fail loudly when
        none can or the registry cannot be read."""
        try:
            bad = self.source.resolve(self.model, self.config.alias)
        except LookupError:  # no alias, or no registry: nothing to fall back on
            raise error from None
        for row in self.source.registry.versions(self.model):  # newest first
            version = str(row["version"])
            if version == bad:
                continue
            try:
                space = self.source.load(self.model, version)
            except Exception:
                continue
            with self.lock:
                self._serve(version, space)
                self.source.version = version
            self.registry_error = redact(f"{type(error).__name__}: {error}".splitlines()[0])[:300]
            log.warning("%s (version %s) cannot serve (%s); serving version %s, the newest that can",
                        self.uri, bad, self.registry_error, version)
            return
        raise error

    def _swap(self, force: bool = False) -> None:
        # under a lock: Serve's local testing mode runs reconfigure concurrently with the first
        # request, and two loads must not interleave
        with self.lock:
            changed = self.source.changed(self.model, self.config.alias)
            if changed is None and not force:
                return
            self._serve(*(changed or (self.version, self.core.space)))

    def router_for(self, version: str, space: CoreSpace) -> SpaceRouter:
        """A router of `space` (registered `version`) with the current settings' prices and policy."""
        table = self.config.price_table()
        router = SpaceRouter(space, self.config.usd_per_call, self.config.default_policy,
                             prices=None if table is None else resolve_prices(space.model_names, table),
                             label=f"{self.model}/{version}")
        learning = self.config.learning
        if learning.explore and learning.explore_usd_per_1k is not None and not router.priced:
            raise ValueError(f"user_config.learning.explore_usd_per_1k bounds what exploring spends, but "
                             f"{self.model} version {version} has no prices to count it with: set "
                             "user_config.prices or usd_per_call, or drop explore_usd_per_1k")
        return router

    def _serve(self, version: str, space: CoreSpace) -> None:
        """Route with `space` (registered `version`) and the current settings (under the lock)."""
        core = self.router_for(version, space)
        for hook in self.on_serve:
            hook(core)
        self.core, self.version = core, version

    def refresh(self) -> None:
        """One look at the alias; an outage is logged once and reported by `health`."""
        try:
            self._swap()
            self.registry_error, self.registry_reachable = None, True
        except Exception as e:
            if self.registry_error is None:  # once per outage, not once per look-up
                log.exception("could not look up %s; still serving version %s", self.uri, self.version)
            self.registry_error = redact(f"{type(e).__name__}: {e}".splitlines()[0])[:300]
            self.registry_reachable = not isinstance(e, RegistryUnreachable)

    def current(self) -> SpaceRouter:
        """The serving router. Loaded on demand only when a request arrives before Serve's first
        reconfigure (its local testing mode allows that); the lock waits for a load in progress."""
        if self.core is None:
            self._swap()
        return self.core

    def health(self) -> dict:
        since = time.monotonic() - self.source.checked if self.source.checked else None
        core = self.current()
        return {"status": "degraded" if self.registry_error else "ok", "space": core.label, "llms": len(core.names),
                "registry": {"reachable": self.registry_reachable, "error": self.registry_error,
                             "seconds_since_check": since}}
