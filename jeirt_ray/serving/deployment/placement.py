"""Why a Serve deployment's replicas wait: what one replica needs, against what each node has free.

Serve says only that replicas "have taken more than 30s to be scheduled"; `jeirt serve` turns
that into one line per deployment: its name, what a replica asks for (its ray_actor_options and
max_replicas_per_node) and every node's free resources, with the node's own replicas of it.
`stuck` is the plain part (tested on its own); `placement_report` reads the live cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

SHOWN = ("CPU", "GPU", "memory")  # the resources a line names (others only when a replica asks for them)


@dataclass
class Node:
    address: str
    free: dict[str, float]
    total: dict[str, float]
    replicas: int = 0  # of the deployment in question


def needs_of(deployment) -> dict[str, float]:
    """What one replica of a Serve config's deployment asks for (Serve's default: 1 CPU)."""
    opts = deployment.ray_actor_options
    opts = opts.model_dump() if hasattr(opts, "model_dump") else {}  # not set: Serve's DEFAULT sentinel
    need = {"CPU": 1.0 if opts.get("num_cpus") is None else float(opts["num_cpus"]),
            "GPU": float(opts.get("num_gpus") or 0), "memory": float(opts.get("memory") or 0),
            **{k: float(v) for k, v in (opts.get("resources") or {}).items()}}
    return {k: v for k, v in need.items() if v > 0}


def per_node_limit(deployment) -> int | None:
    limit = deployment.max_replicas_per_node
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def fits(need: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + 1e-9 >= v for k, v in need.items())


def stuck(name: str, need: dict[str, float], per_node: int | None, nodes: list[Node]) -> str | None:
    """One line saying why no node can take a replica of deployment `name`, or None if one can
    (then it waits for something else: a runtime environment, a starting node)."""
    def room(n: Node) -> bool:
        return fits(need, n.free) and (per_node is None or n.replicas < per_node)
    if any(room(n) for n in nodes):
        return None
    ever = any(fits(need, n.total) for n in nodes)
    limit = f", at most {per_node} per node" if per_node else ""
    where = "; ".join(f"{n.address} {_fmt(n.free, need)}" + (f" (holds {n.replicas})" if n.replicas else "")
                      for n in nodes)
    fix = ("free those resources, add a node, or lower its ray_actor_options" if ever else
           "no node has that much in all: add a larger node or lower its ray_actor_options")
    return f"{name} cannot be placed: a replica needs {_fmt(need, need)}{limit}; free per node: {where}: {fix}"


def _fmt(resources: dict[str, float], need: dict[str, float]) -> str:
    keys = [k for k in SHOWN if k in need or k in ("CPU",)] + [k for k in need if k not in SHOWN]
    parts = []
    for k in keys:
        v = resources.get(k, 0.0)
        parts.append(f"{k} {v / 2**30:.1f} GiB" if k == "memory" else f"{k} {v:g}")
    return ", ".join(parts)


def placement_report(config) -> dict[str, str]:
    """{deployment: the line of `stuck`, read from the live cluster} for each deployment of
    `config` that Serve reports as waiting to be scheduled and no node can take."""
    import ray
    from ray import serve
    from ray._private.state import available_resources_per_node
    from ray.util.state import list_actors

    apps = serve.status().applications
    waiting = [(app, d) for app in config.applications for d in app.deployments
               if app.name in apps and d.name in apps[app.name].deployments
               and "to be scheduled" in (apps[app.name].deployments[d.name].message or "")]
    if not waiting:
        return {}
    free = available_resources_per_node()
    alive = [n for n in ray.nodes() if n["Alive"]]
    # the connected cluster's own address: without one the State API resolves "auto", which fails
    # where other Ray instances run on the host, or reads a stranger's cluster where one does
    actors = list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")],
                         limit=10000)
    lines = {}
    for app, d in waiting:
        held = [a.node_id for a in actors if a.class_name == f"ServeReplica:{app.name}:{d.name}"]
        nodes = [Node(n["NodeManagerAddress"], free.get(n["NodeID"], {}), n["Resources"], held.count(n["NodeID"]))
                 for n in alive]
        line = stuck(d.name, needs_of(d), per_node_limit(d), nodes)
        if line:
            lines[d.name] = line
    return lines
