"""Why one scalar ability per LLM is not enough: a classical 2PL fit and its symptoms.

P(LLM i answers question j) = sigmoid(a_j (theta_i - b_j)) with a free discrimination a_j and
difficulty b_j per question and one ability theta_i per LLM, fitted jointly (full batch,
L-BFGS, a weak Gaussian prior to pin the scale). A question whose a_j is negative is one that
weaker LLMs answer more often; a near-zero a_j says ability does not predict it at all. Both
would be rare if a single ability axis explained the data.
"""

from __future__ import annotations

import numpy as np
import torch


def fit_2pl(q_idx: np.ndarray, m_idx: np.ndarray, labels: np.ndarray, n_questions: int, n_models: int,
            prior: float = 0.01, iters: int = 300) -> dict:
    q, m = torch.as_tensor(q_idx), torch.as_tensor(m_idx)
    y = torch.as_tensor(labels, dtype=torch.float32)
    # slope-intercept form a_j theta_i + c_j (b_j = -c_j / a_j): no saddle at a_j = 0 to cross, and
    # theta starts at each LLM's standardised accuracy so the sign of the axis is "more is better"
    acc = np.bincount(m_idx, weights=labels, minlength=n_models) / np.bincount(m_idx, minlength=n_models).clip(1)
    theta = torch.tensor((acc - acc.mean()) / (acc.std() + 1e-9), dtype=torch.float32, requires_grad=True)
    a = torch.full((n_questions,), 0.5, requires_grad=True)
    c = torch.zeros(n_questions, requires_grad=True)
    opt = torch.optim.LBFGS([theta, a, c], lr=1, max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logit = a[q] * theta[m] + c[q]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="sum")
        loss = loss + prior * (theta.pow(2).sum() + a.pow(2).sum() + c.pow(2).sum())
        loss.backward()
        return loss

    opt.step(closure)
    a_, c_ = a.detach().numpy(), c.detach().numpy()
    with np.errstate(divide="ignore"):
        b_ = -c_ / a_
    return {"theta": theta.detach().numpy(), "a": a_, "b": b_, "c": c_}


def discrimination_summary(a: np.ndarray, answered: np.ndarray, near_zero: float = 0.1) -> dict:
    a = a[answered]
    return {"questions": int(len(a)), "share_negative": float((a < 0).mean()),
            "share_near_zero": float((np.abs(a) < near_zero).mean()), "near_zero_threshold": near_zero,
            "median": float(np.median(a))}


def empirical_icc(theta: np.ndarray, q_idx: np.ndarray, m_idx: np.ndarray, labels: np.ndarray, question: int,
                  bins: int = 4) -> dict:
    """Correct rate of one question by ability bin (quantiles of theta among its answerers),
    and whether that rate is monotone in ability (within 0.05)."""
    sel = q_idx == question
    th, y = theta[m_idx[sel]], labels[sel]
    edges = np.quantile(th, np.linspace(0, 1, bins + 1))
    centres, rates = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        s = (th >= lo) & (th <= hi)
        if s.any():
            centres.append(float(th[s].mean()))
            rates.append(float(y[s].mean()))
    steps = np.diff(rates)
    monotone = bool((steps >= -0.05).all() or (steps <= 0.05).all())
    return {"question": int(question), "ability": centres, "rate": rates, "monotone": monotone}


def order_flips_across_benchmarks(q_idx, m_idx, labels, benchmarks_of_question: np.ndarray, n_models: int) -> dict:
    """Share of LLM pairs whose accuracy order differs between two benchmarks."""
    names = sorted(set(benchmarks_of_question))
    acc = np.full((len(names), n_models), np.nan)
    for i, bname in enumerate(names):
        sel = benchmarks_of_question[q_idx] == bname
        tot = np.bincount(m_idx[sel], weights=labels[sel], minlength=n_models)
        cnt = np.bincount(m_idx[sel], minlength=n_models)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc[i] = tot / cnt
    flips = total = 0
    for x in range(n_models):
        for z in range(x + 1, n_models):
            d = acc[:, x] - acc[:, z]
            d = d[np.isfinite(d)]
            if len(d) < 2:
                continue
            total += 1
            flips += bool((d > 0).any() and (d < 0).any())
    return {"pairs": total, "flipping_pairs": flips, "share": flips / max(total, 1), "benchmarks": len(names)}
