"""JE-IRT against the baselines on every dataset, over split seeds, with paired intervals.

    python benchmarks/across_datasets.py --out results/across.json [--data DIR ...] [--seeds 0 1 2]

For each dataset (default: every folder of ../shared/data) and split seed (by question,
80/10/10): JE-IRT and matrix factorisation each get the configuration search that `jeirt
evaluate` runs (Ray Tune, the same budget for both, validation only) and are the ensemble of
their best trials; KNN (k on validation), the amortised 2PL and the per-LLM majority are
trained on the same split. Reported per dataset: mean +- sd over seeds of test accuracy, AUC,
log-loss and Brier score; the paired difference in test accuracy JE-IRT minus MF and minus KNN
with a 95% interval (bootstrap over test questions, within each seed, averaged over seeds).

Graded labels (alpaca_eval, eq_bench): accuracy counts a prediction right when p >= 0.5 agrees
with label >= 0.5; the Brier score (mean squared error of p against the graded label) and the
log-loss (cross-entropy with the soft label) use the grade itself.

Selection rules, left one dataset out: every completed trial's test predictions are kept, so
each rule (criterion: validation loss / accuracy / AUC; ensemble of the best 1, 3, 5 or 8) can
be scored. For each dataset held out, the rule with the best mean JE-IRT test accuracy on the
other datasets is chosen and reported on the held-out one, next to the default rule.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from _common import SHARED, paired_interval, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.distributed import init_ray
from jeirt_ray.distributed.tune import load_trial, run_search
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.methods import predictors
from jeirt_ray.experiments.prepare import pair_probs, prepare
from jeirt_ray.model.metrics import binary_metrics
from jeirt_ray.experiments.selection import CRITERIA, SearchSettings, rank_trials

BASELINES = ("knn", "irt2pl", "majority")
MEMBER_CHOICES = (1, 3, 5, 8)


def trial_test_probs(prep, trials: list[dict], rows, test) -> list[dict]:
    """Every completed trial with its test pair probabilities (for scoring selection rules)."""
    out = []
    X = torch.as_tensor(prep.X[rows])
    for t in trials:
        if not t.get("completed"):
            continue
        mod = load_trial(t, prep.X.shape[1], prep.data.n_models)
        with torch.no_grad():
            p = torch.sigmoid(mod.score_all(X)).numpy()
        out.append({**t, "test_p": pair_probs(p, rows, test)})
    return out


def rule_probs(trials: list[dict], criterion: str, members: int) -> np.ndarray:
    return np.mean([t["test_p"] for t in rank_trials(trials, criterion)[:members]], axis=0)


def metrics(p: np.ndarray, y: np.ndarray) -> dict:
    return {**binary_metrics(p, y), "brier": float(np.mean((p - y) ** 2))}


def run_dataset(path: Path, seeds: list[int], encoder: str, settings: SearchSettings, storage: Path) -> dict:
    data = load_data(path)
    runs = {}
    for s in seeds:
        prep = prepare(data, make_encoder(encoder), seed=s, cache_root=paths.cache_dir(), progress=False)
        test, rows = prep.pairs("test"), prep.rows("test")
        y = test.y.numpy()
        run = {"methods": {}, "trials": {}}
        for kind in ("jeirt", "mf"):
            res = run_search(prep, kind, settings.model_copy(update={"seed": s}), storage=storage, progress=False)
            run["trials"][kind] = trial_test_probs(prep, res["trials"], rows, test)
            p = rule_probs(run["trials"][kind], settings.criterion, settings.members)
            run["methods"][kind] = {**metrics(p, y), "train_seconds": res["seconds"], "p": p}
        for name, predict, seconds, _ in predictors(prep, BASELINES, train_seed=s, progress=False):
            p = pair_probs(predict(rows), rows, test)
            run["methods"][name] = {**metrics(p, y), "train_seconds": seconds, "p": p}
        run["q"], run["y"] = test.q.numpy(), y
        runs[s] = run
        print(f"{data.name} seed {s}: " + ", ".join(f"{m} {r['test_accuracy']:.4f}" for m, r in run["methods"].items()),
              flush=True)
    return {"name": data.name, "graded": bool(np.any((data.labels > 0) & (data.labels < 1))), "runs": runs,
            "shape": {"llms": int(data.n_models), "questions": int(data.n_questions), "pairs": int(len(data.labels))}}


def summarise(ds: dict, settings: SearchSettings) -> dict:
    runs = ds["runs"]
    methods = list(next(iter(runs.values()))["methods"])
    out = {"shape": ds["shape"], "graded": ds["graded"], "methods": {}, "paired": {}}
    for m in methods:
        out["methods"][m] = {}
        for key in ("test_accuracy", "auc", "log_loss", "brier", "train_seconds"):
            vals = np.array([runs[s]["methods"][m][key] for s in runs])
            out["methods"][m][key] = float(vals.mean())
            out["methods"][m][f"{key}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
            out["methods"][m][f"{key}_per_seed"] = vals.tolist()
    for other in ("mf", "knn"):
        items = []
        for r in runs.values():
            hard = r["y"] >= 0.5
            items.append((r["q"], (r["methods"]["jeirt"]["p"] >= 0.5) == hard, (r["methods"][other]["p"] >= 0.5) == hard))
        diff, ci = paired_interval(items)
        out["paired"][f"jeirt_minus_{other}"] = {"accuracy_difference": diff, "ci95": ci}
    out["rules"] = {}
    for kind in ("jeirt", "mf"):
        for crit in CRITERIA:
            for k in MEMBER_CHOICES:
                accs = [metrics(rule_probs(r["trials"][kind], crit, k), r["y"])["test_accuracy"] for r in runs.values()]
                out["rules"][f"{kind}|{crit}|{k}"] = float(np.mean(accs))
    return out


def leave_one_dataset_out(summary: dict, settings: SearchSettings) -> dict:
    """For each dataset held out: the rule best on the others (mean JE-IRT test accuracy), its
    result on the held-out dataset, and the default rule's."""
    names = list(summary)
    rules = sorted({k.split("|", 1)[1] for k in summary[names[0]]["rules"]})
    default = f"{settings.criterion}|{settings.members}"
    out = {}
    for held in names:
        others = [n for n in names if n != held]
        chosen = max(rules, key=lambda r: np.mean([summary[n]["rules"][f"jeirt|{r}"] for n in others]))
        out[held] = {"chosen_on_others": chosen, "default": default,
                     **{f"{kind}_{which}": summary[held]["rules"][f"{kind}|{r}"]
                        for kind in ("jeirt", "mf") for which, r in (("chosen", chosen), ("default", default))}}
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for j, (other, colour) in enumerate((("mf", "tab:blue"), ("knn", "tab:orange"))):
        d = [summary[n]["paired"][f"jeirt_minus_{other}"] for n in names]
        x = np.arange(len(names)) + (j - 0.5) * 0.25
        mid = np.array([v["accuracy_difference"] for v in d]) * 100
        lo = mid - np.array([v["ci95"][0] for v in d]) * 100
        hi = np.array([v["ci95"][1] for v in d]) * 100 - mid
        ax.errorbar(x, mid, yerr=[lo, hi], fmt="o", capsize=4, color=colour, label=f"JE-IRT minus {other.upper()}")
    ax.axhline(0, color="grey", lw=1)
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel("test accuracy difference (points)")
    ax.set_title("JE-IRT against the baselines, paired, 95% interval (mean over split seeds)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(summary: dict) -> str:
    lines = ["| dataset | LLMs x questions | JE-IRT | MF | KNN | 2PL | majority | JE-IRT - MF [95%] | JE-IRT - KNN [95%] |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in summary.items():
        m = s["methods"]
        cell = [f"{m[k]['test_accuracy']:.4f} +- {m[k]['test_accuracy_sd']:.4f}" for k in ("jeirt", "mf", "knn",
                                                                                          "irt2pl", "majority")]
        pair = [f"{s['paired'][k]['accuracy_difference'] * 100:+.2f} [{s['paired'][k]['ci95'][0] * 100:+.2f}, "
                f"{s['paired'][k]['ci95'][1] * 100:+.2f}]" for k in ("jeirt_minus_mf", "jeirt_minus_knn")]
        lines.append(f"| {name}{' (graded)' if s['graded'] else ''} | {s['shape']['llms']} x {s['shape']['questions']} | "
                     + " | ".join(cell + pair) + " |")
    return "\n".join(lines)


def main():
    ap = parser(__doc__, data=False)
    ap.add_argument("--data", nargs="+", help="dataset folders (default: every folder of ../shared/data)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--trials", type=int, help="configurations per search (default: scaled with the data)")
    args = ap.parse_args()
    folders = [Path(d) for d in args.data] if args.data else sorted(p for p in SHARED.iterdir() if p.is_dir())
    if not folders:
        raise SystemExit(f"no datasets found in {SHARED.resolve()}: pass --data DIR ...")
    settings = SearchSettings(trials=args.trials)
    init_ray(num_cpus=torch.get_num_threads() or None, log_to_driver=False)
    storage = paths.home() / "search-benchmark" / time.strftime("%Y%m%d-%H%M%S")
    start = time.perf_counter()
    summary = {}
    for folder in folders:
        ds = run_dataset(folder, args.seeds, args.encoder, settings, storage)
        summary[ds["name"]] = summarise(ds, settings)
    lodo = leave_one_dataset_out(summary, settings) if len(summary) > 1 else {}
    out = Path(args.out)
    plot(summary, out.with_suffix(".png"))
    table = markdown(summary)
    print(table)
    write_json(args.out, {"seeds": args.seeds, "encoder": args.encoder, "settings": settings.model_dump(),
                          "datasets": summary, "leave_one_dataset_out": lodo, "markdown": table,
                          "plot": str(out.with_suffix(".png")), "seconds": time.perf_counter() - start})


if __name__ == "__main__":
    main()
