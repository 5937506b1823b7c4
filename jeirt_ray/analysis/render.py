"""The report's rendering: each study's results as markdown (`markdown`), and a minimal HTML of
that markdown (`html_page`)."""

from __future__ import annotations

import html
import re

from .studies import STUDIES


def _md_routing(rt: dict) -> list[str]:
    acc, ci = rt["accuracy"], rt["ci95"]
    names = [("oracle", "oracle (any LLM correct)"), ("jeirt_argmax", "JE-IRT argmax"),
             ("mf_argmax", "matrix factorisation argmax"), ("knn_argmax", "KNN argmax"),
             ("per_benchmark_best", "per-benchmark best (reads the benchmark label)"),
             ("best_average", "best on average"), ("random", "random")]
    lines = [f"## Routing ({rt['test_questions']} test questions)", "", "| router | accuracy | 95% interval |",
             "| --- | --- | --- |"]
    lines += [f"| {label} | {acc[k]:.3f} | [{ci[k][0]:.3f}, {ci[k][1]:.3f}] |" for k, label in names if k in acc]
    c = rt["cost"]
    lines += ["", "Candidates per question are the LLMs with a label for it. Cost here is the paper's per-call "
              "figure, not USD (the cost-accuracy frontier prices calls in USD): "
              + ("given per call (--costs)." if set(c["cost_source"].values()) == {"given"} else
                 "the default, billions of parameters read from each name (names without a size priced as the "
                 "largest); see results.json for each.")]
    if c["aiq_jeirt"] is None:
        lines += ["", "Every LLM has the same cost: there is no cost trade-off to show."]
    else:
        lines += ["", f"AIQ (area under the accuracy-vs-cost hull over the cost range): JE-IRT router "
                      f"**{c['aiq_jeirt']:.3f}**, single LLMs alone {c['aiq_single_llms']:.3f}."]
    if "cpt" in c:
        p = c["cpt"]
        fmt = {k: ("not reached" if p[k] is None else f"{p[k]:.1%}") for k in ("cpt_50", "cpt_80")}
        lines += ["", f"CPT, routing between {p['weak']} (cheapest, {p['weak_accuracy']:.3f}) and {p['strong']} "
                      f"(best on training data, {p['strong_accuracy']:.3f}) over {p['questions']} questions: "
                      f"{fmt['cpt_50']} of calls to the strong LLM reach 50% of the gap, {fmt['cpt_80']} reach 80% "
                      f"(a router blind to the question needs 50% and 80%)."]
    return lines + ["", "![accuracy vs cost](routing_cost.png)"]


def _md_onboarding(ob: dict) -> list[str]:
    mean = ob["mean"]
    lines = ["## Onboarding a new LLM", "",
             f"{len(ob['heldout_models'])} LLMs ({', '.join(ob['heldout_models'])}) held out of a space, then each "
             f"fitted from a share of its training questions; test accuracy, mean over them. Joint training: "
             f"**{mean['joint_accuracy']:.3f}**.", "", "| share | random questions | adaptive questions |",
             "| --- | --- | --- |"]
    for k, v in mean["random"].items():
        a = mean["adaptive"].get(k)
        lines.append(f"| {float(k):.0%} | {v:.3f} | {'-' if a is None else f'{a:.3f}'} |")
    return lines + ["", "![onboarding curve](onboarding_curve.png)"]


def _md_irt(tp: dict) -> list[str]:
    flips = tp["order_flips_across_benchmarks"]
    return ["## A scalar ability (classical 2PL) does not fit", "",
            f"Of {tp['questions']} questions, **{tp['share_negative']:.1%}** get a negative discrimination and "
            f"{tp['share_near_zero']:.1%} a near-zero one (|a| < {tp['near_zero_threshold']}). "
            f"{flips['share']:.1%} of LLM pairs swap order between two of the {flips['benchmarks']} benchmarks.", "",
            "![item characteristic curves](irt_2pl_iccs.png)"]


def _md_norm(nd: dict) -> list[str]:
    return ["## Norm is difficulty", "",
            f"Spearman correlation of ||E_Q|| with the share of LLMs answering correctly: **{nd['spearman']:.3f}** "
            f"over {nd['questions']} training questions (negative: larger norm, harder question). Per benchmark: "
            + ", ".join(f"{b} {v:.2f}" for b, v in nd["per_benchmark"].items()) + ".", "",
            "![norm vs difficulty](norm_difficulty.png)"]


def _md_taxonomy(tx: dict) -> list[str]:
    lines = ["## The LLM-internal taxonomy", "",
             f"k-means on question directions, k = {tx['k']} by silhouette: adjusted Rand index **{tx['ari']:.3f}**, "
             f"NMI **{tx['nmi']:.3f}** against the human categories.", "", "![contingency](taxonomy_contingency.png)",
             "", "| cluster | size | mostly | typical question |", "| --- | --- | --- | --- |"]
    for c in tx["clusters"]:
        q = c["typical_questions"][0].replace("|", "/").replace("\n", " ") if c["typical_questions"] else ""
        lines.append(f"| {c['cluster']} | {c['size']} | {c['top_benchmark']} | {q} |")
    return lines


def _md_probes(probes: dict) -> list[str]:
    lines = ["## Difference-of-means probes (held-out AUC)", "", "| probe | in the space | raw encoder |",
             "| --- | --- | --- |"]
    lines += [f"| {name} | {p['auc_space']:.3f} | {p['auc_raw_encoder']:.3f} |" for name, p in probes.items()]
    ar = probes.get("arithmetic (keyword)", {})
    if ar.get("top_non_arithmetic_questions"):
        lines += ["", "Non-arithmetic test questions furthest along the arithmetic direction:", ""]
        lines += [f"- {t}" for t in ar["top_non_arithmetic_questions"]]
    return lines


def _md_lobo(lb: dict) -> list[str]:
    lines = ["## Leave one benchmark out", "",
             f"Each benchmark's test questions scored by the main space and by a space trained without the "
             f"benchmark. Mean drop **{100 * lb['mean_drop']:.2f}** points; Spearman correlation of alignment (max "
             f"cosine of mean question directions) with the drop: **{lb['spearman_alignment_drop']:.3f}** "
             f"(the paper expects negative).", "", "| benchmark | main | left out | drop (points) | alignment | nearest |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['benchmark']} | {r['accuracy_main']:.3f} | {r['accuracy_left_out']:.3f} | {100 * r['drop']:.2f} | "
              f"{r['alignment']['max']:.3f} | {r['alignment']['nearest']} |" for r in lb["benchmarks"]]
    return lines + ["", "![alignment vs drop](lobo_alignment_drop.png)"]


def _md_ranking(rk: dict) -> list[str]:
    return ["## No universal ranking; smooth in direction", "",
            f"{rk['flips_any']['share']:.1%} of LLM pairs change order across test questions "
            f"({rk['flips_by_0.05']['share']:.1%} by more than 0.05 in probability). Spearman correlation of the "
            f"angle between two questions with the change in predicted probabilities: "
            f"{rk['smoothness']['spearman_angle_change']:.3f}."]


def _md_cost(c: dict) -> list[str]:
    if "skipped" in c:
        return ["## Cost-accuracy frontier", "", c["skipped"]]
    best = c["best_single"]

    def share(v):
        return "never" if v is None else f"{v:.1%}"

    lines = ["## Cost-accuracy frontier", "", f"{c['prices']}; tokens: {c['token_counter']}; answers: "
             f"{c['answer_tokens']}. Reference: {best['llm']} (best on training questions), test accuracy "
             f"{best['accuracy']:.3f} at ${best['cost_per_1k']:.3f} per 1,000 queries.", "",
             "| method | AIQ | 95% interval | cost to reach the reference | accuracy at 10% / 25% / 50% of its cost |",
             "| --- | --- | --- | --- | --- |"]
    for name, m in c["methods"].items():
        ci = m.get("aiq_ci95") or [float("nan")] * 2
        at = " / ".join("-" if v is None else f"{v:.3f}" for v in m["accuracy_at_cost_share"].values())
        lines.append(f"| {name} | {m['aiq']:.4f} | [{ci[0]:.4f}, {ci[1]:.4f}] | "
                     f"{share(m['cost_share_at_best_accuracy'])} | {at} |")
    lines += ["", "![cost frontier](cost_frontier.png)"]
    return lines


_MARKDOWN = {"routing": _md_routing, "onboarding": _md_onboarding, "irt_2pl": _md_irt,
             "norm_difficulty": _md_norm, "taxonomy": _md_taxonomy, "probes": _md_probes, "lobo": _md_lobo,
             "ranking": _md_ranking, "cost": _md_cost}


def markdown(r: dict) -> str:
    syn = " (SYNTHETIC data)" if r["synthetic"] else ""
    lines = [f"# JE-IRT report: {r['data']}{syn}", "",
             f"{r['llms']} LLMs, {r['questions']} questions; space: recipe {r['space']['recipe']}, "
             f"{r['space']['members']} member(s), d = {r['space']['dim']}."]
    for name in STUDIES:
        if name in r:
            lines += [""] + _MARKDOWN[name](r[name])
    return "\n".join(lines) + "\n"


def html_page(md: str) -> str:
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
