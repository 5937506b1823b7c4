"""Multi-node Ray clusters on this machine for the `cluster` tests, on Ray's own harness
(`ray.cluster_utils.Cluster`): every node is its own raylet with its own object store and
resources, added and removed by the test. Commands join through RAY_ADDRESS, as a user's
`ray job submit` or a KubeRay RayJob would. On exit every node is stopped and the test fails if
any Ray process of the cluster outlives it."""

from __future__ import annotations

import contextlib
import json
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


# The head's node id where Ray's fake multi-node provider expects it (`ray start --fixed-head-id`)
FAKE_HEAD_NODE_ID = "f" * 51 + "00000"
IDLE_TIMEOUT_MINUTES = 0.1


def _autoscaling_config(head_cpus: float, node_types: dict, gcs_address: str) -> dict:
    """A cluster config for Ray's autoscaler with its fake multi-node provider, which starts each
    node it launches as a raylet on this machine (the keys of upstream's fake_multi_node/example.yaml,
    which the Ray wheel does not ship)."""
    types = {name: {"node_config": {}, "min_workers": 0, **t,
                    "resources": {"object_store_memory": 200 * 1024**2, **t["resources"]}}
             for name, t in node_types.items()}
    return {
        "cluster_name": "jeirt-test", "max_workers": sum(t["max_workers"] for t in types.values()),
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "available_node_types": {**types, "ray.head.default": {
            "resources": {"CPU": head_cpus}, "node_config": {}, "max_workers": 0}},
        "head_node_type": "ray.head.default", "upscaling_speed": 1.0,
        "idle_timeout_minutes": IDLE_TIMEOUT_MINUTES, "auth": {}, "docker": {}, "file_mounts": {},
        "cluster_synced_files": [], "file_mounts_sync_continuously": False, "rsync_exclude": [],
        "rsync_filter": [], "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": []}


@contextlib.contextmanager
def nodes(head_cpus: float = 1, workers: int = 1, worker_cpus: float = 1, env: dict | None = None,
          system_config: dict | None = None, autoscale: dict | None = None, **head_args):
    """A cluster of a head (`head_cpus`) and `workers` nodes; `env`: variables set while it runs
    (e.g. RAY_REDIS_ADDRESS for an external Redis, read by the head when it starts). `autoscale`:
    worker node types for Ray's autoscaler, `{name: {"resources": {"CPU": 1}, "max_workers": 2}}`,
    which then adds and removes the worker nodes (idle ones after IDLE_TIMEOUT_MINUTES)."""
    import ray
    from ray._private.services import get_node_ip_address
    from ray.cluster_utils import Cluster

    since = time.time()
    # short: Ray's Unix sockets live under it (a 107-byte path limit)
    temp_dir = tempfile.mkdtemp(prefix="jrc-", dir="/tmp")
    gcs_port = _free_port()
    if autoscale:
        config = Path(temp_dir) / "autoscaling.json"
        config.write_text(json.dumps(_autoscaling_config(head_cpus, autoscale, f"{get_node_ip_address()}:{gcs_port}")))
        head_args["autoscaling_config"] = str(config)
        env = {**(env or {}), "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
               "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID}
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    node_args = {"temp_dir": temp_dir, "object_store_memory": 200 * 1024**2}
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
            **node_args, "num_cpus": head_cpus, "include_dashboard": True, "dashboard_port": _free_port({gcs_port}),
            "gcs_server_port": gcs_port, **({"_system_config": system_config} if system_config else {}), **head_args})
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
        named = []
        for p in left:
            with contextlib.suppress(psutil.Error):
                named.append((p.pid, p.name()))  # before the kill: a dead process has no name to read
                p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"Ray processes outlived the cluster: {named}"
