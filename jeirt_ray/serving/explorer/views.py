"""What the web explorer shows of a served space, computed once per space version.

- The map: question directions (E_Q / ||E_Q||, the topic) projected to 2-D by PCA. PCA is chosen
  because it is a linear map: the LLM vectors go through the same projection and land in the same
  picture (a non-linear embedding such as UMAP or t-SNE has no place for points it was not fitted
  on), and it is deterministic and fast at 100k questions. The browser gets at most `max_points`
  questions, sampled evenly per benchmark (seeded); the principal axes come from all of them.
- Difficulty: the distribution of the training questions' ||E_Q|| (a histogram), against which
  a routed query's difficulty is shown.
- The LLM table: each LLM's predicted accuracy per benchmark (the ensemble's mean probability over
  the benchmark's training questions), computed in chunks so that 100k questions x thousands of
  LLMs never form one matrix; onboarded LLMs are marked.
"""

from __future__ import annotations

import numpy as np

from ...model.space import CoreSpace


def _directions(space: CoreSpace, chunk: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """(unit directions, norms) of the training questions' E_Q (first member)."""
    X = space.question_embeddings
    parts = [space.question_vectors(X[i:i + chunk]) for i in range(0, len(X), chunk)]
    E = np.concatenate(parts) if parts else np.zeros((0, 1))
    norms = np.linalg.norm(E, axis=1)
    return E / norms[:, None].clip(1e-9), norms


def _sample(benchmarks: np.ndarray, max_points: int, seed: int) -> np.ndarray:
    """Row indices: at most `max_points`, split evenly over benchmarks (all of a small one)."""
    rng = np.random.default_rng(seed)
    names, counts = np.unique(benchmarks, return_counts=True)
    if counts.sum() <= max_points:
        return np.arange(len(benchmarks))
    # water-filling: each benchmark gets an equal share, small ones give their spare to the rest
    quota, left, order = {}, max_points, np.argsort(counts)
    for k, i in enumerate(order):
        quota[names[i]] = min(int(counts[i]), left // (len(order) - k))
        left -= quota[names[i]]
    rows = [rng.choice(np.flatnonzero(benchmarks == b), quota[b], replace=False) for b in names]
    return np.sort(np.concatenate(rows))


def space_map(space: CoreSpace, max_points: int = 4000, seed: int = 0, text_chars: int = 300) -> dict:
    if space.question_embeddings is None or not len(space.question_benchmarks):
        raise ValueError("this space stores no training questions to map")
    U, norms = _directions(space)
    bench = np.asarray(space.question_benchmarks)
    mean = U.mean(0)
    # principal axes of the directions (SVD of the centred matrix, on up to 50k rows: the axes
    # of a large random sample are those of the whole)
    fit_rows = _sample(bench, 50_000, seed)
    _, s, vt = np.linalg.svd(U[fit_rows] - mean, full_matrices=False)
    axes = vt[:2]
    explained = (s[:2] ** 2 / (s ** 2).sum()).tolist()
    rows = _sample(bench, max_points, seed)
    xy = (U[rows] - mean) @ axes.T
    theta = space.model_vectors(0)
    llm_xy = (theta / np.linalg.norm(theta, axis=1, keepdims=True).clip(1e-9) - mean) @ axes.T
    texts = space.question_texts or None
    counts, edges = np.histogram(norms, bins=40)
    return {
        "projection": "PCA of the question directions E_Q/||E_Q|| (first ensemble member); LLM vectors "
                      "projected by the same map",
        "explained_variance": explained,
        "questions_total": int(len(U)), "questions_shown": int(len(rows)),
        "sampling": "all questions" if len(rows) == len(U) else f"{len(rows)} of {len(U)}, evenly per benchmark (seed {seed})",
        "benchmarks": sorted(set(bench.tolist())),
        "points": {"x": xy[:, 0].round(4).tolist(), "y": xy[:, 1].round(4).tolist(),
                   "benchmark": bench[rows].tolist(), "difficulty": norms[rows].round(4).tolist(),
                   "question_id": [space.question_ids[i] for i in rows] if space.question_ids else [],
                   "text": [texts[i][:text_chars] for i in rows] if texts else None},
        "llms": {"name": list(space.model_names), "x": llm_xy[:, 0].round(4).tolist(),
                 "y": llm_xy[:, 1].round(4).tolist()},
        "difficulty_histogram": {"edges": edges.round(4).tolist(), "counts": counts.tolist()},
    }


def llm_table(space: CoreSpace, chunk: int = 4096) -> dict:
    if space.question_embeddings is None or not len(space.question_benchmarks):
        raise ValueError("this space stores no training questions to score the LLMs on")
    bench = np.asarray(space.question_benchmarks)
    names, group = np.unique(bench, return_inverse=True)
    sums = np.zeros((len(names), len(space.model_names)))
    X = space.question_embeddings
    for i in range(0, len(X), chunk):
        np.add.at(sums, group[i:i + chunk], space.predict_proba(X[i:i + chunk]))
    acc = sums / np.bincount(group, minlength=len(names))[:, None]
    overall = sums.sum(0) / len(X)
    onboarded = set(space.metadata.get("onboarded", {}))
    return {"benchmarks": names.tolist(), "llms": list(space.model_names),
            "accuracy": acc.T.round(4).tolist(),  # (LLMs, benchmarks)
            "overall": overall.round(4).tolist(),
            "onboarded": [n in onboarded for n in space.model_names]}
