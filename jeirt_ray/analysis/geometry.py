"""Geometry studies of a trained space: norm vs difficulty, the LLM-internal taxonomy,
difference-of-means ability probes, and whether a universal ranking of LLMs exists.

Every study takes plain arrays (question embeddings from the space, labels from the data) and
returns a dict of figures; plotting is separate (report.py), so each study is checked on
synthetic data with a planted answer (tests/test_analysis.py).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr
from sklearn.cluster import KMeans
from sklearn.metrics import (adjusted_rand_score, normalized_mutual_info_score, roc_auc_score,
                             silhouette_score)


def question_accuracy(q_idx: np.ndarray, labels: np.ndarray, n_questions: int) -> np.ndarray:
    """Mean label of each question over the LLMs that answered it (NaN when none did)."""
    total = np.bincount(q_idx, weights=labels, minlength=n_questions)
    count = np.bincount(q_idx, minlength=n_questions)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count


def norm_vs_difficulty(norms: np.ndarray, accuracy: np.ndarray, benchmarks: np.ndarray) -> dict:
    """Spearman correlation of ||E_Q|| with the question's empirical accuracy over LLMs: the
    paper's claim is that it is negative (a larger norm is a harder question)."""
    ok = np.isfinite(accuracy)
    overall = spearmanr(norms[ok], accuracy[ok]).statistic
    per = {}
    for b in sorted(set(benchmarks[ok])):
        sel = ok & (benchmarks == b)
        if sel.sum() >= 10 and np.ptp(accuracy[sel]) > 0:
            per[str(b)] = float(spearmanr(norms[sel], accuracy[sel]).statistic)
    return {"spearman": float(overall), "per_benchmark": per, "questions": int(ok.sum())}


def taxonomy(directions: np.ndarray, benchmarks: np.ndarray, texts: np.ndarray, ks=range(2, 21),
             seed: int = 0, typical: int = 3, sample: int = 4000) -> dict:
    """Cluster the unit question directions (k-means, k chosen by the highest silhouette on a
    sample) and compare with the human categories (ARI, NMI, contingency table); name each
    cluster by its questions closest to the centroid."""
    rng = np.random.default_rng(seed)
    ks = [k for k in ks if k < len(directions)]
    idx = rng.choice(len(directions), size=min(sample, len(directions)), replace=False)
    scores = {}
    for k in ks:
        labels = KMeans(k, n_init=4, random_state=seed).fit_predict(directions[idx])
        scores[k] = float(silhouette_score(directions[idx], labels))
    k = max(scores, key=scores.get)
    km = KMeans(k, n_init=4, random_state=seed).fit(directions)
    clusters = km.labels_
    cats = sorted(set(benchmarks))
    table = np.zeros((k, len(cats)), dtype=int)
    for c, b in zip(clusters, benchmarks):
        table[c, cats.index(b)] += 1
    names = []
    for c in range(k):
        members = np.flatnonzero(clusters == c)
        d = np.linalg.norm(directions[members] - km.cluster_centers_[c], axis=1)
        names.append({"cluster": c, "size": int(len(members)),
                      "top_benchmark": cats[int(table[c].argmax())],
                      "typical_questions": [str(texts[i])[:160] for i in members[np.argsort(d)[:typical]]]})
    return {"k": int(k), "silhouette_by_k": scores, "ari": float(adjusted_rand_score(benchmarks, clusters)),
            "nmi": float(normalized_mutual_info_score(benchmarks, clusters)), "categories": cats,
            "contingency": table.tolist(), "clusters": names, "assignment": clusters}


def probe(vectors: np.ndarray, positive: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict:
    """Difference-of-means direction between positive and negative questions of `train`, scored
    on `test` by AUC of the projection (positive vs negative)."""
    pos, neg = train & positive, train & ~positive
    if not pos.any() or not neg.any() or not (test & positive).any() or not (test & ~positive).any():
        raise ValueError("the probe needs positive and negative questions in both train and test")
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-9)
    direction = v[pos].mean(0) - v[neg].mean(0)
    direction /= np.linalg.norm(direction)
    score = v @ direction
    return {"auc": float(roc_auc_score(positive[test], score[test])), "direction": direction, "score": score}


def ranking_flips(probs: np.ndarray, margin: float = 0.0) -> dict:
    """Over question directions, the share of LLM pairs whose predicted order flips (each is ahead
    on some questions and behind on others, by more than `margin`): 0 would mean a universal
    ranking exists."""
    n = probs.shape[1]
    flips = total = 0
    for a in range(n):
        d = probs[:, a:a + 1] - probs[:, a + 1:]
        ahead = (d > margin).any(0)
        behind = (d < -margin).any(0)
        flips += int((ahead & behind).sum())
        total += n - a - 1
    return {"pairs": total, "flipping_pairs": flips, "share": flips / max(total, 1), "margin": margin}


def smoothness(directions: np.ndarray, probs: np.ndarray, seed: int = 0, pairs: int = 20000, bins: int = 8) -> dict:
    """Mean absolute change of predicted probabilities against the angle between two questions
    (random pairs, binned by angle): small angles should mean small changes."""
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(directions), size=(2, pairs))
    angle = np.degrees(np.arccos(np.clip(np.einsum("ij,ij->i", directions[i], directions[j]), -1, 1)))
    change = np.abs(probs[i] - probs[j]).mean(1)
    edges = np.quantile(angle, np.linspace(0, 1, bins + 1))
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (angle >= lo) & (angle <= hi)
        rows.append({"angle_from": float(lo), "angle_to": float(hi), "mean_abs_change": float(change[sel].mean())})
    return {"bins": rows, "spearman_angle_change": float(spearmanr(angle, change).statistic)}
