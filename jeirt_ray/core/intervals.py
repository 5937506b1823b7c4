"""Bootstrap intervals of a mean, with scipy.stats.bootstrap: over rows, or over groups of rows
(whole decisions: a decision's grades from several sources move together)."""

from __future__ import annotations

import numpy as np


def mean_ci(values, groups=None, n_boot: int = 2000, seed: int = 0, weights=None) -> list[float]:
    """95% percentile-bootstrap interval of mean(values) (weighted by `weights`, where given); with
    `groups` (one label per value), the groups are resampled whole and the mean is over their
    values. A single group, or values that do not vary between groups, give the mean twice; no
    values give NaNs."""
    from scipy.stats import bootstrap
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return [float("nan"), float("nan")]
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    if groups is None:
        sums, counts = values * w, w
    else:
        _, group = np.unique(np.asarray(groups), return_inverse=True)
        sums, counts = np.bincount(group, weights=values * w), np.bincount(group, weights=w)
    if len(sums) < 2 or np.ptp(sums / counts) == 0:
        mean = float(np.average(values, weights=w))
        return [mean, mean]
    res = bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis) / c.sum(axis), paired=True, vectorized=True,
                    n_resamples=n_boot, method="percentile", rng=np.random.default_rng(seed))
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]
