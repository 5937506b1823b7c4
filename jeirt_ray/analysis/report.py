"""`jeirt report`: run the studies on one dataset and write report.md, report.html, PNGs and
results.json (logged to MLflow when MLFLOW_TRACKING_URI is set).

Studies here: routing (JE-IRT argmax against the reference routers), norm vs difficulty, the
classical 2PL's discriminations and order flips, the LLM-internal taxonomy, difference-of-means
probes (per benchmark, and arithmetic vs the rest), and the absence of a universal ranking with
the smoothness of predictions. Test questions are used only for the scores that need held-out
data (routing accuracy, probe AUCs); every fit is on training data.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
from scipy.special import expit

from ..experiment import Prepared
from ..model.space import Space
from ..routing.evaluate import available_argmax, baseline_routers, bootstrap_ci, routed_labels
from . import geometry, irt

ARITHMETIC = re.compile(r"\d\s*[-+*/x×÷^]\s*\d|\b(sum|product|plus|minus|times|divided|multiply|calculate)\b", re.I)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def run_report(prep: Prepared, space: Space, out: str | Path, seed: int = 0) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data, X = prep.data, prep.X
    train_mask = prep.split.masks(data)[0]
    tq, tm, ty = data.q_idx[train_mask], data.m_idx[train_mask], data.labels[train_mask]
    E = np.mean([space.question_vectors(X, member=i) for i in range(len(space.members))], axis=0)
    norms = np.linalg.norm(E, axis=1)
    directions = E / norms[:, None].clip(1e-9)
    probs_all = space.predict_proba(X)
    results: dict = {"data": data.name, "synthetic": bool(data.synthetic), "questions": int(data.n_questions),
                     "llms": int(data.n_models), "space": {"recipe": space.metadata.get("recipe"),
                                                           "members": len(space.members), "dim": space.config.dim}}
    plt = _plt()

    # routing on test questions
    test_rows = prep.rows("test")
    labels = data.label_matrix(test_rows)
    refs = baseline_routers(labels, tm, ty, data.benchmarks[tq], data.benchmarks[test_rows], seed=seed)
    jeirt = routed_labels(available_argmax(probs_all[test_rows], ~np.isnan(labels)), labels)
    results["routing"] = {"jeirt_argmax": float(jeirt.mean()), "jeirt_argmax_ci95": bootstrap_ci(jeirt),
                          **{k: float(v.mean()) for k, v in refs.items()}, "test_questions": int(len(test_rows))}

    # norm vs difficulty, on training questions (their accuracy is training data)
    train_q = np.unique(tq)
    acc = geometry.question_accuracy(tq, ty, data.n_questions)
    results["norm_difficulty"] = geometry.norm_vs_difficulty(norms[train_q], acc[train_q], data.benchmarks[train_q])
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(norms[train_q], acc[train_q], s=3, alpha=0.3)
    ax.set_xlabel("||E_Q|| (predicted difficulty)")
    ax.set_ylabel("share of LLMs correct")
    ax.set_title(f"norm vs difficulty: Spearman {results['norm_difficulty']['spearman']:.2f}")
    fig.tight_layout()
    fig.savefig(out / "norm_difficulty.png", dpi=110)
    plt.close(fig)

    # classical 2PL
    fit = irt.fit_2pl(tq, tm, ty, data.n_questions, data.n_models)
    answered = np.bincount(tq, minlength=data.n_questions) > 0
    results["irt_2pl"] = irt.discrimination_summary(fit["a"], answered)
    results["irt_2pl"]["order_flips_across_benchmarks"] = irt.order_flips_across_benchmarks(
        tq, tm, ty, data.benchmarks, data.n_models)
    order = np.argsort(fit["a"][answered])
    picks = np.flatnonzero(answered)[np.r_[order[:2], order[len(order) // 2], order[-1]]]
    iccs = [irt.empirical_icc(fit["theta"], tq, tm, ty, int(j)) for j in picks]
    results["irt_2pl"]["example_iccs"] = iccs
    fig, axes = plt.subplots(1, len(iccs), figsize=(3.2 * len(iccs), 3), sharey=True)
    grid = np.linspace(fit["theta"].min(), fit["theta"].max(), 50)
    for ax, icc in zip(axes, iccs):
        j = icc["question"]
        ax.plot(grid, expit(fit["a"][j] * grid + fit["c"][j]), label="2PL fit")
        ax.plot(icc["ability"], icc["rate"], "o-" if icc["monotone"] else "s-r", label="empirical")
        ax.set_title(f"a={fit['a'][j]:.2f}{'' if icc['monotone'] else ' (non-monotone)'}", fontsize=9)
        ax.set_xlabel("ability")
    axes[0].set_ylabel("P(correct)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "irt_2pl_iccs.png", dpi=110)
    plt.close(fig)

    # taxonomy
    tax = geometry.taxonomy(directions, data.benchmarks, data.texts, seed=seed)
    results["taxonomy"] = {k: v for k, v in tax.items() if k != "assignment"}
    table = np.array(tax["contingency"], dtype=float)
    fig, ax = plt.subplots(figsize=(1 + 0.45 * len(tax["categories"]), 1 + 0.35 * tax["k"]))
    ax.imshow(table / table.sum(1, keepdims=True).clip(1), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(tax["categories"])), tax["categories"], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(tax["k"]), [f"cluster {c}" for c in range(tax["k"])], fontsize=7)
    ax.set_title(f"clusters vs categories (ARI {tax['ari']:.2f}, NMI {tax['nmi']:.2f})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "taxonomy_contingency.png", dpi=110)
    plt.close(fig)

    # probes: each benchmark vs the rest, and arithmetic vs the rest, in E_Q against raw embeddings
    part = prep.split.question_part
    fit_q, held_q = part == 0, part == 2
    probes = {}
    arithmetic = np.array([bool(ARITHMETIC.search(str(t))) for t in data.texts])
    targets = {f"benchmark={b}": data.benchmarks == b for b in sorted(set(data.benchmarks))}
    targets["arithmetic (keyword)"] = arithmetic
    for name, positive in targets.items():
        try:
            p_space = geometry.probe(E, positive, fit_q, held_q)
            p_raw = geometry.probe(X, positive, fit_q, held_q)
        except ValueError:
            continue
        entry = {"auc_space": p_space["auc"], "auc_raw_encoder": p_raw["auc"], "positives": int(positive.sum())}
        if name.startswith("arithmetic"):
            others = held_q & ~arithmetic
            top = np.flatnonzero(others)[np.argsort(-p_space["score"][others])[:5]]
            entry["top_non_arithmetic_questions"] = [str(data.texts[i])[:160] for i in top]
        probes[name] = entry
    results["probes"] = probes

    # no universal ranking, smoothness
    results["ranking"] = {"flips_any": geometry.ranking_flips(probs_all[test_rows]),
                          "flips_by_0.05": geometry.ranking_flips(probs_all[test_rows], 0.05),
                          "smoothness": geometry.smoothness(directions, probs_all, seed=seed)}

    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    md = _markdown(results)
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(_html(md))
    return results


def _markdown(r: dict) -> str:
    rt, nd, tp, tx = r["routing"], r["norm_difficulty"], r["irt_2pl"], r["taxonomy"]
    syn = " (SYNTHETIC data)" if r["synthetic"] else ""
    lines = [f"# JE-IRT report: {r['data']}{syn}", "",
             f"{r['llms']} LLMs, {r['questions']} questions; space: recipe {r['space']['recipe']}, "
             f"{r['space']['members']} member(s), d = {r['space']['dim']}.", "",
             "## Routing (test questions)", "", "| router | accuracy |", "| --- | --- |",
             f"| oracle | {rt['oracle']:.3f} |",
             f"| JE-IRT argmax | {rt['jeirt_argmax']:.3f} [{rt['jeirt_argmax_ci95'][0]:.3f}, "
             f"{rt['jeirt_argmax_ci95'][1]:.3f}] |",
             f"| per-benchmark best (reads the benchmark label) | {rt['per_benchmark_best']:.3f} |",
             f"| best on average | {rt['best_average']:.3f} |", f"| random | {rt['random']:.3f} |", "",
             "## Norm is difficulty", "",
             f"Spearman correlation of ||E_Q|| with the share of LLMs answering correctly: "
             f"**{nd['spearman']:.3f}** over {nd['questions']} training questions (negative: larger norm, "
             f"harder question). Per benchmark: " +
             ", ".join(f"{b} {v:.2f}" for b, v in nd["per_benchmark"].items()) + ".", "",
             "![norm vs difficulty](norm_difficulty.png)", "",
             "## A scalar ability (classical 2PL) does not fit", "",
             f"Of {tp['questions']} questions, **{tp['share_negative']:.1%}** get a negative discrimination and "
             f"{tp['share_near_zero']:.1%} a near-zero one (|a| < {tp['near_zero_threshold']}). "
             f"{tp['order_flips_across_benchmarks']['share']:.1%} of LLM pairs swap order between two of the "
             f"{tp['order_flips_across_benchmarks']['benchmarks']} benchmarks.", "",
             "![item characteristic curves](irt_2pl_iccs.png)", "",
             "## The LLM-internal taxonomy", "",
             f"k-means on question directions, k = {tx['k']} by silhouette: adjusted Rand index "
             f"**{tx['ari']:.3f}**, NMI **{tx['nmi']:.3f}** against the human categories.", "",
             "![contingency](taxonomy_contingency.png)", "", "| cluster | size | mostly | typical question |",
             "| --- | --- | --- | --- |"]
    for c in tx["clusters"]:
        q = c["typical_questions"][0].replace("|", "/").replace("\n", " ") if c["typical_questions"] else ""
        lines.append(f"| {c['cluster']} | {c['size']} | {c['top_benchmark']} | {q} |")
    lines += ["", "## Difference-of-means probes (held-out AUC)", "", "| probe | in the space | raw encoder |",
              "| --- | --- | --- |"]
    for name, p in r["probes"].items():
        lines.append(f"| {name} | {p['auc_space']:.3f} | {p['auc_raw_encoder']:.3f} |")
    ar = r["probes"].get("arithmetic (keyword)", {})
    if ar.get("top_non_arithmetic_questions"):
        lines += ["", "Non-arithmetic test questions furthest along the arithmetic direction:", ""]
        lines += [f"- {t}" for t in ar["top_non_arithmetic_questions"]]
    rk = r["ranking"]
    lines += ["", "## No universal ranking; smooth in direction", "",
              f"{rk['flips_any']['share']:.1%} of LLM pairs change order across test questions "
              f"({rk['flips_by_0.05']['share']:.1%} by more than 0.05 in probability). Spearman correlation of the "
              f"angle between two questions with the change in predicted probabilities: "
              f"{rk['smoothness']['spearman_angle_change']:.3f}.", ""]
    return "\n".join(lines)


def _html(md: str) -> str:
    """A minimal rendering of the markdown above (headings, tables, images, lists, paragraphs)."""
    out, table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("- "):
                continue
            if not table:
                out.append("<table>")
                table = True
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if table:
            out.append("</table>")
            table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.startswith("!["):
            alt, src = re.match(r"!\[(.*)\]\((.*)\)", line).groups()
            out.append(f'<img alt="{html.escape(alt)}" src="{html.escape(src)}" style="max-width:100%">')
        elif line.startswith("- "):
            out.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.strip():
            out.append("<p>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(line)) + "</p>")
    if table:
        out.append("</table>")
    return ("<!doctype html><meta charset='utf-8'><title>JE-IRT report</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td{border:1px solid #ccc;padding:2px 6px}"
            "table{border-collapse:collapse}</style>\n" + "\n".join(out))
