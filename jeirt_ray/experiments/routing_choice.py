"""Choose a space's routing policy on validation questions (routing.policies holds the policies
and their signals; this module trains what the choice needs).

`tune_routing` chooses the policy on validation questions twice over: as they are (in
distribution) and with benchmarks held out in turn (leave-one-benchmark-out inside the training
data: a member of the space and the signals fitted without the benchmark, as a query of an
unseen benchmark meets them), and keeps the policy that does best held out among those within
`ID_TOLERANCE` of the best in distribution; there every mixing policy has a coverage gate. A
mixing policy is kept only where its gain over the argmax is clear of noise in distribution and
no loss is within the noise on held-out benchmarks, measured out of half
(routing.policies.choose_policy); the evidence is stored with the policy.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from ..data.splits import Split
from ..routing.policies import (GATE_QUANTILES, MAX_HELD_OUT_BENCHMARKS, MIN_HELD_OUT_QUESTIONS, Policy,
                                RoutingSignals, SignalBuilder, candidate_policies, choose_policy)
from .methods import train_space


def held_out_benchmark_signals(space, prep, rows: np.ndarray, labels: np.ndarray, benches: np.ndarray,
                               limit: int = MAX_HELD_OUT_BENCHMARKS) -> list[tuple[RoutingSignals, np.ndarray]]:
    """Leave-one-benchmark-out inside the training data, as a query of an unseen benchmark meets
    the router: for each of up to `limit` benchmarks with training questions and
    at least MIN_HELD_OUT_QUESTIONS validation questions (most first), one member of the space's
    configuration is trained without the benchmark (its training and validation questions both
    left out; for as many epochs as the space's members took) and a builder fitted without it;
    returns the signals of its validation questions (`rows`) with their labels."""
    bench_of = np.asarray(prep.data.benchmarks)
    if len(benches) < 2:
        return []
    sizes = {b: int((bench_of[rows] == b).sum()) for b in benches}
    chosen = sorted((b for b in benches if sizes[b] >= MIN_HELD_OUT_QUESTIONS), key=lambda b: (-sizes[b], b))
    config = space.config.model_copy(update={"max_epochs": _epochs_taken(space)})
    out = []
    for b in chosen[:limit]:
        part = prep.split.question_part.copy()
        part[(bench_of == b) & (part < 2)] = 3  # in no part that trains or stops training
        without = dataclasses.replace(prep, split=Split("without_benchmark", prep.split.seed, part,
                                                         prep.split.heldout_models))
        train = without.pairs("train")
        if not len(train.q):
            continue
        member = train_space(without, config, members=1, seed=prep.split.seed, progress=False)
        builder = SignalBuilder.fit(prep.X, train.q.numpy(), train.m.numpy(), train.y.numpy(), bench_of,
                                    prep.data.n_models)
        here = rows[bench_of[rows] == b]
        out.append((builder.build(member.predict_proba(prep.X[here]), prep.X[here]), labels[bench_of[rows] == b]))
    return out


def _epochs_taken(space) -> int:
    """The median epochs to the best validation loss of the space's members (its configuration's
    max_epochs where they are not recorded)."""
    took = [m.get("best_epoch", m.get("epochs")) for m in space.metadata.get("members", [])]
    took = [int(t) + 1 for t in took if t is not None]
    return int(np.median(took)) if took else space.config.max_epochs


def tune_routing(space, prep, held_out_benchmarks: int = MAX_HELD_OUT_BENCHMARKS) -> tuple[object, Policy, list[dict]]:
    """Choose the routing policy on the validation questions of `prep`, with up to
    `held_out_benchmarks` benchmarks held out in turn (one training each; 0: in distribution
    alone, no coverage gates). Returns (a copy of
    `space` that carries it: metadata `routing_policy`, signal arrays in `routing`, so that the
    Serve router applies what evaluation chose; the policy; the validation table). `space`
    itself is unchanged."""
    train = prep.pairs("train")
    builder = SignalBuilder.fit(prep.X, train.q.numpy(), train.m.numpy(), train.y.numpy(), prep.data.benchmarks,
                                prep.data.n_models)
    rows = prep.split.questions(1)
    labels = prep.data.label_matrix(rows)
    labelled = (~np.isnan(labels)).any(1)
    rows, labels = rows[labelled], labels[labelled]
    if not len(rows):
        raise ValueError("no validation question has a label: cannot choose a routing policy")
    p_val = space.predict_proba(prep.X[rows])
    signals = builder.build(p_val, prep.X[rows])
    held_out = held_out_benchmark_signals(space, prep, rows, labels, builder.benches, held_out_benchmarks)
    gates = np.quantile(signals.coverage, GATE_QUANTILES) if held_out else ()
    candidates = candidate_policies(ks=builder.ks, has_topic=builder.topic_coef is not None, gates=gates)
    policy, table, evidence = choose_policy(signals, labels, candidates, held_out, seed=prep.split.seed)
    row = table[candidates.index(policy)]
    chosen = {**policy.model_dump(), "val_accuracy": row["val_accuracy"],
              "held_out_accuracy": row.get("held_out_accuracy"), "held_out_benchmarks": len(held_out),
              "benchmarks": builder.benches.tolist(), "evidence": evidence}
    tuned = dataclasses.replace(space, metadata={**copy.deepcopy(space.metadata), "routing_policy": chosen},
                                routing=builder.to_arrays())
    return tuned, policy, table
