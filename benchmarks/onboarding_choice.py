"""Onboarding's default strategy per purpose, chosen on the validation split.

    python benchmarks/onboarding_choice.py VAL.json [VAL.json ...] --out F.json

Each input is a `benchmarks/onboarding.py --adaptive --evaluate val` run (one per dataset; a
test-split run is refused: the test split is for the report, never for a choice). The rule
(jeirt_ray/analysis/onboarding_curve.py, choose_strategies): per purpose, the strategies never
shown worse than random (paired 95% intervals, every dataset and N) on the metrics the purpose
cares about (route: the routing gap to joint training; estimate: the accuracy error; both: the
two), and among them the lowest mean of those metrics. jeirt_ray/model/onboarding_defaults.py
sets what this run picks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jeirt_ray.analysis.onboarding_curve import choose_strategies


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="validation runs of benchmarks/onboarding.py --adaptive")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args()
    runs = {}
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        if run.get("evaluate") != "val":
            sys.exit(f"{path}: evaluated on {run.get('evaluate')!r}, not 'val'; choose on a --evaluate val run")
        if "random" not in run.get("strategies", ()):
            sys.exit(f"{path}: has no random baseline")
        runs[run["data"]] = run
    picks = choose_strategies({name: (run["strategies"], run["curve"]) for name, run in runs.items()})
    for purpose, p in picks.items():
        print(f"{purpose:8s} -> {p['pick']:12s} " + "  ".join(
            f"{h} {t['score']:.2f}{'' if t['eligible'] else ' (worse than random)'}" for h, t in p["strategies"].items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"runs": {k: {"split_seeds": r["split_seeds"], "responses": r["responses"]}
                                                   for k, r in runs.items()}, "purposes": picks}, indent=1))


if __name__ == "__main__":
    main()
