"""Multi-node Ray clusters on this machine for the `cluster` tests, on Ray's own harness
(`ray.cluster_utils.Cluster`): every node is its own raylet with its own object store and
resources, added and removed by the test. Commands join through RAY_ADDRESS, as a user's
`ray job submit` or a KubeRay RayJob would. On exit every node is stopped and the test fails if
any Ray process of the cluster outlives it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from .conftest import free_port as _free_port

JEIRT = str(Path(sys.executable).with_name("jeirt"))


class Nodes:
    """A head and worker nodes of 1 CPU each (unless told otherwise)."""

    def __init__(self, cluster, temp_dir: str, node_args: dict):
        self.cluster, self.temp_dir, self.node_args = cluster, temp_dir, node_args

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def head(self):
        return self.cluster.head_node

    @property
    def workers(self) -> list:
        return list(self.cluster.worker_nodes)

    def add(self, num_cpus: float = 1, **args):
        """A fresh worker node, once it has joined."""
        node = self.cluster.add_node(**{**self.node_args, "num_cpus": num_cpus, **args})
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node) -> None:
        """The node's raylet, object store and workers killed, as when a machine is lost."""
        self.cluster.remove_node(node, allow_graceful=False)

    def env(self, **extra) -> dict:
        """The environment of a command that joins this cluster."""
        return {**os.environ, "RAY_ADDRESS": self.address, **extra}

    def jeirt(self, *args, env: dict | None = None, **popen) -> subprocess.Popen:
        """`jeirt ARGS` joined to this cluster, its output in a file next to the cluster's."""
        log = open(Path(self.temp_dir) / f"jeirt-{args[0]}-{time.time_ns()}.log", "w")
        return subprocess.Popen([JEIRT, *map(str, args)], env=env or self.env(), stdout=log,
                                stderr=subprocess.STDOUT, **popen)


def output_of(proc: subprocess.Popen) -> str:
    return Path(proc.stdout.name).read_text() if proc.stdout else ""


def _ray_processes(temp_dir: str, since: float) -> list[psutil.Process]:
    """This cluster's processes: descendants of this process started since the cluster, and any
    process naming the cluster's folder (the raylets and the GCS do)."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True) if p.create_time() >= since - 1}
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if any(temp_dir in part for part in p.info["cmdline"] or ()):
                found[p.pid] = p
    return [p for p in found.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@contextlib.contextmanager
def nodes(head_cpus: float = 1, workers: int = 1, worker_cpus: float = 1, env: dict | None = None,
          system_config: dict | None = None, **head_args):
    """A cluster of a head (`head_cpus`) and `workers` nodes; `env`: variables set while it runs
    (e.g. RAY_REDIS_ADDRESS for an external Redis, read by the head when it starts)."""
    import ray
    from ray.cluster_utils import Cluster

    since = time.time()
    # short: Ray's Unix sockets live under it (a 107-byte path limit)
    temp_dir = tempfile.mkdtemp(prefix="jrc-", dir="/tmp")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    node_args = {"temp_dir": temp_dir, "object_store_memory": 200 * 1024**2}
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
            **node_args, "num_cpus": head_cpus, "include_dashboard": True, "dashboard_port": _free_port(),
            "gcs_server_port": _free_port(), **({"_system_config": system_config} if system_config else {}), **head_args})
        handle = Nodes(cluster, temp_dir, node_args)
        for _ in range(workers):
            handle.add(worker_cpus)
        yield handle
    finally:
        with contextlib.suppress(Exception):
            from ray import serve
            if ray.is_initialized():
                serve.shutdown()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        # workers exit once their raylet is gone: give them a moment, then kill what is left
        deadline = time.time() + 20
        while (left := _ray_processes(temp_dir, since)) and time.time() < deadline:
            time.sleep(0.5)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"Ray processes outlived the cluster: {[(p.pid, p.name()) for p in left]}"
