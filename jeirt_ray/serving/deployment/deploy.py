"""Start the Serve application described by a Serve config YAML (deployments/*.yaml)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import yaml

from ..settings import SPACE_ENCODER
from .ingress import DEFAULT_INGRESS, check_ingress, use_ingress

log = logging.getLogger("jeirt.serve")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_open_host(host: str | None, where: str = "this service") -> None:
    """`auth: open` (no keys needed) only where Serve listens on loopback; a ValueError naming the fix."""
    if host not in LOOPBACK:
        raise ValueError(f"{where} has args.auth: open on host {host}, where anyone who reaches it could spend your "
                         "upstreams: serve it on 127.0.0.1, or pass --auth required and give clients keys "
                         "(`jeirt keys create`)")


def serve_listens_on() -> str | None:
    """The host Serve's HTTP proxies listen on, as its controller holds it (whatever started it:
    `jeirt serve`, `serve run`, `serve deploy`); None in Serve's local testing mode, which runs
    without Ray and listens nowhere."""
    import ray
    if not ray.is_initialized():
        return None
    from ray.serve.context import _get_global_client
    return _get_global_client().http_config.host


def load_config(path: str | Path, model: str | None = None, port: int | None = None, auth: str | None = None):
    """The validated Serve config (Ray's own ServeDeploySchema), with optional overrides of the
    registered model name (every application's args.model), the HTTP port and the access mode
    (args.auth). An open service (no keys needed) may only listen on a loopback host."""
    from ray.serve.schema import ServeDeploySchema
    if auth not in (None, "open", "required"):
        raise ValueError(f"--auth must be open or required, not {auth!r}")
    raw = yaml.safe_load(Path(path).read_text())
    host = (raw.get("http_options") or {}).get("host", "127.0.0.1")
    for app in raw.get("applications", []):
        if model:
            app.setdefault("args", {})["model"] = model
        if auth:
            app.setdefault("args", {})["auth"] = auth
        if (app.get("args") or {}).get("auth") == "open":
            check_open_host(host, f"{path}: application {app.get('name')!r}")
    if port is not None:
        raw.setdefault("http_options", {})["port"] = port
    try:
        config = ServeDeploySchema.model_validate(raw)
    except Exception as e:
        raise ValueError(f"{path}: not a valid Serve config: {e}") from e
    from ..settings import check_application
    for app in config.applications:
        if app.import_path.startswith("jeirt_ray."):
            try:
                check_application(app)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
    return config


def check_port(config) -> None:
    """The HTTP port must be free before anything starts; an OSError names the fix."""
    import socket
    host, port = config.http_options.host, config.http_options.port
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # only a listener counts, not TIME_WAIT
        try:
            s.bind((host, port))
        except OSError:
            raise OSError(f"port {port} on {host} is in use: stop what holds it, or pass --port N") from None


def check_registry(config) -> None:
    """Every application's space (`models:/<args.model>@<Router alias>`) must resolve, and must
    have been trained on the encoder that the config serves, before anything deploys; a
    LookupError names the fix. Opening the registry here also creates a local MLflow store once,
    so replicas never race to create its tables."""
    from ...encoders import make_encoder
    from ...tracking.registry import SpaceRegistry
    for app in config.applications:
        args = app.args or {}
        if "model" not in args:
            continue
        router = next((d for d in app.deployments if d.name == "Router"), None)
        alias = ((router.user_config or {}) if router else {}).get("alias", "champion")
        uri = f"models:/{args['model']}@{alias}"
        registry = SpaceRegistry(args.get("tracking_uri"))
        version = registry.resolve(uri)
        trained_on = version.tags.get("encoder_id")
        encoder = args.get("encoder", SPACE_ENCODER)
        if encoder == SPACE_ENCODER:  # the replicas get the encoder of the version this alias serves
            encoder = args["encoder"] = registry.serving_encoder(uri)
        if encoder.startswith("models:/"):  # a registered space's own (fine-tuned) encoder
            serves = registry.encoder_of(encoder)[1]
        else:
            serves = make_encoder(encoder).encoder_id  # cheap: the weights load lazily
        if trained_on and trained_on != serves:
            fix = (f"set args.encoder to {uri} (the space carries its fine-tuned encoder)"
                   if version.tags.get("own_encoder") == "true" else
                   f"set args.encoder to the space's encoder, or train one on {encoder!r}")
            raise LookupError(f"{uri} (version {version.version}) was trained on encoder {trained_on!r}, but the "
                              f"config's args.encoder {encoder!r} is {serves!r}: {fix}")


def deploy(config, timeout_s: float = 300, announce=None, stop=None) -> str:
    """Deploy every application of `config` on the current Ray cluster; wait until they run (or
    until the event `stop` is set). Returns the base URL. Raises with Serve's message when an
    application fails to deploy. A replica that no node can take (placement.py) is said once
    through `announce` (default: the log) while the wait goes on (an autoscaler may add a node),
    and is the error at the timeout."""
    from ray import serve
    from ray.serve._private.api import serve_start

    from .placement import placement_report

    client = serve_start(http_options=config.http_options.model_dump(), proxy_location=config.proxy_location)
    client.deploy_apps(config, _blocking=False)
    started = time.monotonic()
    names = [a.name for a in config.applications]
    said: set[str] = set()
    checked = started
    while True:
        apps = serve.status().applications
        states = {n: apps[n].status if n in apps else "NOT_STARTED" for n in names}
        failed = {n: apps[n].message for n in names if n in apps and apps[n].status in ("DEPLOY_FAILED", "UNHEALTHY")}
        if failed:
            raise RuntimeError(f"Serve application(s) failed to deploy: {failed}")
        if all(s == "RUNNING" for s in states.values()) or (stop is not None and stop.is_set()):
            break
        now = time.monotonic()
        timed_out = now > started + timeout_s
        if now - checked > 5 or timed_out:  # Serve says a replica waits to be scheduled after 30 s
            checked = now
            stuck = placement_report(config)  # {deployment: why no node takes a replica}
            if stuck and timed_out:
                raise TimeoutError(f"not running after {timeout_s:.0f} s: {'; '.join(stuck.values())}")
            for name in set(stuck) - said:
                (announce or log.warning)(stuck[name])
            said |= set(stuck)
        if timed_out:
            raise TimeoutError(f"Serve applications not running after {timeout_s:.0f} s: {states}")
        time.sleep(0.5)
    return f"http://{config.http_options.host}:{config.http_options.port}"


def metrics_line() -> str:
    """Where this node's Prometheus metrics are (Ray's metrics export port, random unless the
    cluster was started with --metrics-export-port), as a line to announce; '' where unknown."""
    import ray
    try:
        node = ray._private.worker.global_worker.node
        return f"Prometheus metrics: http://{node.node_ip_address}:{node.metrics_export_port}/metrics\n"
    except AttributeError:  # joined a cluster this process did not start: its nodes say where
        return ""


def serve_forever(path: str | Path, model: str | None = None, port: int | None = None, announce=print,
                  auth: str | None = None, ingress: str = DEFAULT_INGRESS) -> None:
    """`jeirt serve`: check the config, the port and the registry before anything starts,
    deploy on Ray behind `ingress` (ingress.py), and serve until SIGINT or SIGTERM."""
    import signal
    import threading

    from ...distributed import init_ray
    check_ingress(ingress)
    config = load_config(path, model, port, auth)
    check_port(config)
    check_registry(config)  # also creates the MLflow store here, once, before any replica starts
    note = use_ingress(ingress)
    if note:
        announce(note)
    init_ray()
    stop = threading.Event()  # set by SIGINT/SIGTERM, from here on: even while deploying
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    url = deploy(config, announce=announce, stop=stop)
    if not stop.is_set():
        keyed = any((a.args or {}).get("auth", "required") == "required" for a in config.applications)
        access = ("every route but /health needs an API key (jeirt keys create --name me --scopes route,chat)"
                  if keyed else "open: route, chat, feedback and explore need no key (this machine only)")
        key = "JEIRT_API_KEY=<key> " if keyed else ""
        announce(f"serving on {url} (docs: {url}/docs; {access}). Try: {key}jeirt route \"What is 2 + 2?\" "
                 f"--url {url}\n{metrics_line()}Ctrl-C stops the service.")
        stop.wait()
    drain(config, announce)


def drain(config, announce=print) -> None:
    """Stop serving without losing the answers in flight: each application is deleted first (its
    replicas take no new request and finish those they hold, up to each deployment's
    graceful_shutdown_timeout_s, while Serve's proxy stays up to relay them), then Serve stops."""
    from ray import serve
    announce("stopping: no new requests; those in flight finish (up to each deployment's "
             "graceful_shutdown_timeout_s)")
    started = time.monotonic()
    for app in config.applications:
        try:
            serve.delete(app.name)  # blocks until its replicas are gone
        except Exception as e:  # the cluster itself may be going: stop anyway
            log.warning("could not drain %s: %s", app.name, e)
    serve.shutdown()
    announce(f"stopped after {time.monotonic() - started:.1f} s of draining")
