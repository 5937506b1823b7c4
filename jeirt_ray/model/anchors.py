"""Anchor questions: a space's questions in the order that tells most about an LLM's accuracy,
chosen on its known LLMs' answers, and the accuracy learned from a new LLM's answers to them.

With hundreds of known LLMs a space holds more than their vectors: their answers (`CoreSpace.answers`).
As metabench and tinyBenchmarks do, the questions whose answers together predict the known LLMs'
accuracy best are chosen greedily (orthogonal matching pursuit on the answers of the known LLMs
that answered nearly every question), and a ridge regression learned on the known LLMs maps a new
LLM's answers to the first n anchors to its accuracy, overall and per benchmark: a supervised map
from exactly the answers asked to exactly the figure wanted, where the vector's prediction goes
through the space's own error. The 90% interval is split-conformal: the anchors are chosen on two
thirds of the known LLMs, and the residuals of a regression learned on those are measured on the
other third, whose answers chose nothing.
"""

from __future__ import annotations

import numpy as np
from cachetools import LRUCache

MIN_LLMS = 200  # known LLMs that answered nearly every question, needed to choose anchors
MIN_KNOWN = 3 * MIN_LLMS // 2  # such LLMs a space needs: two thirds of them choose, a third calibrates
LENGTH = 200  # anchors chosen; past them the order goes on at random
MIN_ANSWERS = 10  # answered anchors below which no anchor estimate is made
FULL = 0.95  # share of the questions a known LLM must have answered to help choose the anchors
COVERAGE = 0.8  # share of a group's questions a known LLM must have answered to teach its accuracy there
MIN_CALIBRATION = 30  # held-out known LLMs a group's interval needs
ALPHAS = np.logspace(-2, 3, 12)
NEIGHBOURS = 10  # known LLMs whose residuals correct a new LLM's estimate
FOLDS = 5
CACHED = 64  # learned maps kept per space (each a few MB at thousands of LLMs)


def pursue(X: np.ndarray, target: np.ndarray, steps: int) -> np.ndarray:
    """Orthogonal matching pursuit: `steps` columns of `X` (LLMs x questions) picked one by one,
    each the one whose part not explained by those already picked best explains what of `target`
    (one figure per LLM; or several, LLMs x figures, each scaled to unit spread: the pick then
    explains most of them together, simultaneous pursuit) they leave."""
    R = X - X.mean(0)  # every column's part not yet explained, kept orthogonal to the picks
    r = target.reshape(len(X), -1) - target.reshape(len(X), -1).mean(0)
    r = r / np.maximum(r.std(0), 1e-12)
    chosen: list[int] = []
    for _ in range(min(steps, X.shape[1])):
        power = (R ** 2).sum(0)
        score = np.where(power > 1e-9, ((R.T @ r) ** 2).sum(1) / np.maximum(power, 1e-9), -1.0)
        score[chosen] = -1.0
        j = int(np.argmax(score))
        if score[j] <= 0:
            break
        chosen.append(j)
        v = R[:, j] / np.sqrt(power[j])
        R -= np.outer(v, v @ R)
        r = r - np.outer(v, v @ r)
    return np.array(chosen, dtype=int)


class Anchors:
    """The anchor order of a space's questions and the regressions from answers to accuracy."""

    def __init__(self, answers: np.ndarray, missing: int, seed: int = 0, groups: np.ndarray | None = None):
        """`answers`: the known LLMs' answers (LLMs x questions, percent; `missing` where none).
        `groups` (one label per question, e.g. its benchmark): choose the anchors for the accuracy
        on each group at once rather than for the overall accuracy (the default: on the Open LLM
        Leaderboard it estimates the overall accuracy better and GSM8K's score far better, the
        other benchmarks' scores a little worse; docs/results/population.md)."""
        seen = answers != missing
        self.y = np.where(seen, answers.astype(np.float32) / 100, np.nan).astype(np.float32)  # LLMs x questions
        # a trained space keeps the answers to its training questions: the others are never anchors
        self.covered = seen.any(0)
        rng = np.random.default_rng(seed)
        self.calibration = rng.random(len(answers)) < 1 / 3
        full = (seen[:, self.covered].mean(1) >= FULL) & ~self.calibration
        X = self.y[np.ix_(full, self.covered)].astype(np.float64)
        X = np.where(np.isnan(X), np.nanmean(X, 0, keepdims=True), X)  # the few gaps: the question's mean
        if groups is None:
            target = X.mean(1)
        else:
            of = np.asarray(groups)[self.covered]
            target = np.stack([X[:, of == g].mean(1) for g in np.unique(of)], 1)
        picked = np.flatnonzero(self.covered)[pursue(X, target, LENGTH)]
        rest = np.setdiff1d(np.arange(answers.shape[1]), picked)
        self.order = np.r_[picked, rng.permutation(rest)].astype(int)
        self._fits = LRUCache(maxsize=CACHED)  # learned maps by (anchors asked, questions): a plan re-asks them

    @staticmethod
    def enough(answers: np.ndarray | None, missing: int) -> bool:
        """Whether a space with these answers can choose anchors."""
        if answers is None or not len(answers):
            return False
        seen = answers != missing
        return int((seen[:, seen.any(0)].mean(1) >= FULL).sum()) >= MIN_KNOWN

    def within(self, rows: np.ndarray, n: int | None = None) -> np.ndarray:
        """The anchor order restricted to question `rows` (its first `n`)."""
        return self.order[np.isin(self.order, rows)][:n]

    def estimate(self, rows: np.ndarray, labels: np.ndarray, groups: dict[str, np.ndarray],
                 level: float = 0.9) -> dict[str, tuple[float, float, float]]:
        """{group: (accuracy, low, high)}: a new LLM's accuracy over each group's questions
        (`groups`: question rows; those no known LLM answered count only where it answered them)
        from its `labels` on question `rows` (the answered anchors, in order): its answers count
        as answered, and the rest of the group's accuracy is learned by a ridge regression on the
        known LLMs from the answers to the longest prefix of `rows` that enough of them (twice as
        many as its length) answered; a group too few known LLMs teach is left out."""
        rows = np.asarray(rows, dtype=int)
        labels = np.asarray(labels, dtype=np.float64)
        if len(rows) < MIN_ANSWERS:
            return {}
        gaps = np.isnan(self.y[:, rows])
        answered_to = np.where(gaps.any(1), gaps.argmax(1), len(rows))  # each known LLM's answered prefix
        out = {}
        for g, members in groups.items():
            members = np.asarray(members, dtype=int)
            asked = np.isin(members, rows)
            unknown = members[~asked & self.covered[members]]  # what the regression speaks for
            total = int(asked.sum()) + len(unknown)
            seen = float(labels[np.isin(rows, members)].sum())
            if not len(unknown):
                if total:
                    out[g] = (seen / total,) * 3
                continue
            key = (rows.tobytes(), members.tobytes(), level)
            if key not in self._fits:
                self._fits[key] = self._fit(rows, unknown, answered_to, level)
            fit = self._fits[key]
            if fit is None:
                continue
            learned, half, n = fit
            rest = float(np.clip(learned.predict(labels[:n]), 0.0, 1.0))
            share = len(unknown) / total
            point = (seen + len(unknown) * rest) / total
            out[g] = (point, max(0.0, point - share * half), min(1.0, point + share * half))
        return out

    def learn(self, rows: np.ndarray, target: np.ndarray) -> "Learned | None":
        """The map from the answers to question `rows` to any figure of the known LLMs (`target`:
        one per known LLM, NaN where unknown; e.g. a leaderboard's score), learned on those that
        answered all of `rows`; None where fewer than twice as many as `rows` did."""
        ok = ~np.isnan(self.y[:, rows]).any(1) & np.isfinite(target)
        if ok.sum() < max(MIN_LLMS // 2, 2 * len(rows)):
            return None
        return Learned(self.y[np.ix_(ok, rows)].astype(np.float64), np.asarray(target, dtype=np.float64)[ok])

    def _fit(self, rows: np.ndarray, unknown: np.ndarray, answered_to: np.ndarray, level: float):
        """A `Learned` map to the known LLMs' accuracy on the `unknown` questions, or None."""
        part = self.y[:, unknown]
        ok = (~np.isnan(part)).mean(1) >= COVERAGE
        if (ok & self.calibration).sum() < MIN_CALIBRATION:
            return None
        need = lambda n: max(MIN_LLMS // 2, 2 * n)  # noqa: E731
        train_to = np.sort(answered_to[ok & ~self.calibration])[::-1]  # descending: LLMs teaching a prefix of n
        n = len(rows)
        while n >= MIN_ANSWERS and (len(train_to) < need(n) or train_to[need(n) - 1] < n):
            n = n * 3 // 4
        use = ok & (answered_to >= n)
        if n < MIN_ANSWERS or (use & self.calibration).sum() < MIN_CALIBRATION:
            return None
        target = np.nanmean(part[use], 1)
        X = self.y[np.ix_(use, rows[:n])]
        held = self.calibration[use]
        first = Learned(X[~held], target[~held])
        residuals = np.abs(target[held] - np.array([first.predict(x) for x in X[held]]))
        m = len(residuals)
        half = float(np.quantile(residuals, min(1.0, np.ceil((m + 1) * level) / m)))  # split-conformal
        return Learned(X, target), half, n


class Learned:
    """A ridge regression from answers to accuracy, and its residual near the answers: the mean
    out-of-fold residual of the NEIGHBOURS known LLMs that answered most alike (in a population
    of fine-tunes and merges, a new LLM's twins are off as it is)."""

    def __init__(self, X: np.ndarray, target: np.ndarray):
        from sklearn.linear_model import Ridge, RidgeCV
        from sklearn.model_selection import cross_val_predict
        self.X = X
        self.ridge = RidgeCV(alphas=ALPHAS).fit(X, target)
        self.residuals = target - cross_val_predict(Ridge(alpha=self.ridge.alpha_), X, target, cv=FOLDS)

    def predict(self, x: np.ndarray) -> float:
        alike = np.abs(self.X - x).sum(1)
        nearest = np.argpartition(alike, NEIGHBOURS - 1)[:NEIGHBOURS] if len(alike) > NEIGHBOURS else slice(None)
        return float(self.ridge.predict(x[None])[0] + self.residuals[nearest].mean())


def anchors_of(space) -> Anchors | None:
    """The space's anchors (chosen once per loaded space), or None where it keeps too few LLMs' answers."""
    from .space import NOT_ANSWERED
    cached = space.__dict__.get("_anchors")
    if cached is None or cached[0] is not space.answers:
        found = Anchors(space.answers, NOT_ANSWERED) if Anchors.enough(space.answers, NOT_ANSWERED) else None
        space.__dict__["_anchors"] = cached = (space.answers, found)
    return cached[1]
