"""`jeirt learn`'s reading and learning, shared out by LLM: each shard streams the grades of its
own LLMs from the feedback store and applies the online update to their vectors, in arrival order.

Each LLM's posterior is updated by its own grades only (learning/online.py), so shards that split
the LLMs reach exactly the vectors one process reaches, and run side by side: in this process
(one shard) or as Ray actors, one CPU each, on whatever cluster `init_ray` joins. A shard keeps its
held-out grades (a share of the decisions fixed by their ids, feedback/log.in_share, sized so that
about `max_held` are expected) for the comparison, learns every other grade at once, and learns the
held-out ones once the comparison is made (`learn_held`): no grade is dropped, and which are held
out does not depend on how the LLMs are shared out.
"""

from __future__ import annotations

import numpy as np

from ..learning import LOOP_DEFAULTS, OnlineState, Outcomes
from .applied import outcomes_of
from .log import in_share
from .store import FeedbackStore

CHUNK = 10_000  # rows read at a time
DTYPES = {"seq": np.int64, "x": np.float32, "llm": np.int64, "y": np.float64, "p": np.float64,
          "w": np.float64, "id": object}  # of the held-out sample


class ShardLearner:
    def __init__(self, space, llms: list[str], url: str | None, after: int, upto: int, min_time: float,
                 held_share: float, sources: tuple[str, ...] | None = None):
        self.space, self.llms = space, llms
        self.store = FeedbackStore(url, create=False)
        self.window = (after, upto, min_time)
        self.held_share, self.sources = held_share, sources
        self.state = OnlineState(space, **LOOP_DEFAULTS)
        self.cols = [space.model_names.index(n) for n in llms]
        self.held: dict[str, list] = {k: [] for k in DTYPES}

    def learn(self) -> dict:
        """Learn the grades not held out; the held-out sample, counts, and the learned vectors."""
        after, upto, min_time = self.window
        index = {n: i for i, n in enumerate(self.space.model_names)}
        n_learn = n_held = 0
        while rows := self.store.learnable(after, upto, self.llms, self.space.encoder_id, min_time, CHUNK,
                                           sources=self.sources):
            after = rows[-1]["seq"]
            rows = [r for r in rows if len(r["embedding"]) == self.space.in_dim]
            learn = []
            for r in rows:
                if not in_share(r["id"], self.held_share):
                    learn.append(r)
                    continue
                n_held += 1
                # no propensity logged: deterministic
                for k, v in (("seq", r["seq"]), ("x", r["embedding"]), ("llm", index[r["llm"]]), ("y", r["score"]),
                             ("p", r["propensity"] or 1.0), ("w", r["weight"]), ("id", r["id"])):
                    self.held[k].append(v)
            n_learn += len(learn)
            if learn:
                self.state.update_in_order(outcomes_of(learn, index))
        held = {k: np.asarray(v, dtype=DTYPES[k]) for k, v in self.held.items()}
        held["x"] = held["x"].reshape(-1, self.space.in_dim)
        return {"learned": n_learn, "held_out": n_held, "held": held, **self.vectors()}

    def learn_held(self) -> dict:
        """Learn the held-out grades kept (in arrival order); their number and the vectors."""
        for i in range(0, len(self.held["y"]), CHUNK):  # the adapter on a chunk at a time
            part = slice(i, i + CHUNK)
            self.state.update_in_order(Outcomes(np.stack(self.held["x"][part]), self.held["llm"][part],
                                                self.held["y"][part], self.held["w"][part]))
        return {"learned": len(self.held["y"]), **self.vectors()}

    def vectors(self) -> dict:
        return {"cols": self.cols, "theta": [t[self.cols] for t in self.state.theta]}


def share_llms(rows_per_llm: dict[str, int], names: list[str], workers: int) -> list[list[str]]:
    """The space's LLMs in at most `workers` groups of about equal grades (the largest first, each
    to the group with the fewest so far); LLMs without grades are left out."""
    groups: list[list[str]] = [[] for _ in range(workers)]
    load = [0] * workers
    for name in sorted((n for n in names if rows_per_llm.get(n)), key=lambda n: -rows_per_llm[n]):
        g = int(np.argmin(load))
        groups[g].append(name)
        load[g] += rows_per_llm[name]
    return [g for g in groups if g] or [list(names)]


def start(space, groups: list[list[str]], **window) -> list:
    """The shards: one in this process for one group, else a Ray actor (one CPU) per group."""
    if len(groups) == 1:
        return [ShardLearner(space, groups[0], **window)]
    import ray

    from ..distributed import init_ray
    init_ray()
    free = ray.available_resources().get("CPU", 0)  # an actor that finds none would wait for ever
    if len(groups) > free:
        raise ValueError(f"--workers {len(groups)} needs {len(groups)} free CPUs; the Ray cluster has {free:g}: "
                         f"ask for at most {max(int(free), 1)} workers, or add nodes")
    actor = ray.remote(num_cpus=1)(ShardLearner)
    ref = ray.put(space)
    return [actor.remote(ref, g, **window) for g in groups]


def call(shards: list, method: str) -> list[dict]:
    """`method` on every shard, side by side when they are Ray actors."""
    if isinstance(shards[0], ShardLearner):
        return [getattr(s, method)() for s in shards]
    import ray
    return ray.get([getattr(s, method).remote() for s in shards])


def stop(shards: list) -> None:
    """Free the shards' CPUs (Ray actors end; one in this process needs nothing)."""
    if shards and not isinstance(shards[0], ShardLearner):
        import ray
        for s in shards:
            ray.kill(s)


def merge(state: OnlineState, results: list[dict]) -> None:
    """The shards' learned vectors, into `state`."""
    for r in results:
        for theta, part in zip(state.theta, r["theta"]):
            theta[r["cols"]] = part
