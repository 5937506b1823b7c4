"""Importing lm-evaluation-harness samples at scale, against the converter a user would write
with pandas.

    python benchmarks/import_speed.py --out results/import_speed.json [--models 5000] [--tasks 10] \
        [--questions 40] [--baseline-models 500] [--workdir DIR] [--format harness|leaderboard]

Writes a synthetic folder in the harness's real layout, which is also the Open LLM Leaderboard
v2's details layout (one `<org>__<model>` folder per model with `results_<date>.json` and
`samples_<task>_<date>.jsonl`, records as lm_eval's evaluation tracker writes them, a one-shot
prompt each; `--format leaderboard` names the tasks `leaderboard_*` as the leaderboard does and
imports with `jeirt data import leaderboard`), then times, each in a fresh child process so that
its peak memory (ru_maxrss) is its own:
- `jeirt data import FORMAT` (the importer, then Parquet out);
- the baseline: `pd.read_json(lines=True)` per file, concatenated, on the first
  --baseline-models models (it holds every record's columns in memory).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import parser, write_json

DATE = "2024-06-26T18-52-00.123456"
SHOT = "Question: Which gas do plants absorb from the air?\nA. oxygen\nB. carbon dioxide\nC. helium\nD. neon\nAnswer: B"


def write_folder(root: Path, models: int, tasks: int, questions: int, seed: int = 0, prefix: str = "") -> int:
    rng = np.random.default_rng(seed)
    ability = rng.normal(size=models)
    difficulty = rng.normal(size=(tasks, questions))
    for m in range(models):
        folder = root / f"org__model-{m:05d}"
        folder.mkdir(parents=True)
        (folder / f"results_{DATE}.json").write_text(json.dumps({
            "results": {}, "model_name": f"org/model-{m:05d}",
            "configs": {f"{prefix}task{t:02d}": {"num_fewshot": 1, "fewshot_delimiter": "\n\n"} for t in range(tasks)}}))
        for t in range(tasks):
            p = 1 / (1 + np.exp(-(ability[m] - difficulty[t])))
            correct = rng.random(questions) < p
            lines = []
            for i in range(questions):
                prompt = f"{SHOT}\n\nQuestion: task {t} item {i}: which option is right?\nA. one\nB. two\nC. three\nD. four\nAnswer:"
                lines.append(json.dumps({
                    "doc_id": i, "doc": {"question": f"task {t} item {i}", "choices": ["one", "two", "three", "four"],
                                         "answer": 1},
                    "target": "1", "arguments": {f"gen_args_{k}": {"arg_0": prompt, "arg_1": f" {c}"}
                                                 for k, c in enumerate("ABCD")},
                    "resps": [[[str(-rng.random()), "False"]] for _ in range(4)],
                    "filtered_resps": [[str(-rng.random()), "False"] for _ in range(4)], "filter": "none",
                    "metrics": ["acc", "acc_norm"], "doc_hash": f"h{t}-{i}", "prompt_hash": "p", "target_hash": "t",
                    "acc": float(correct[i]), "acc_norm": float(correct[i])}))
            (folder / f"samples_{prefix}task{t:02d}_{DATE}.jsonl").write_text("\n".join(lines) + "\n")
    return models * tasks * questions


BASELINE = """
import sys, glob, pandas as pd
files = sorted(glob.glob(sys.argv[1] + "/*/samples_*.jsonl"))[:int(sys.argv[2])]
frames = []
for f in files:
    df = pd.read_json(f, lines=True)
    df["model"] = f.split("/")[-2]
    frames.append(df)
out = pd.concat(frames)
out["prompt"] = [a["gen_args_0"]["arg_0"].split("\\n\\n")[-1] for a in out["arguments"]]
out[["model", "doc_hash", "prompt", "acc"]].to_parquet(sys.argv[3])
"""


# runs the command as its only child and prints that child's peak RSS (ru_maxrss of a process's
# children is a maximum over all of them, so each measurement gets a launcher of its own)
LAUNCHER = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); " \
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def timed_child(cmd: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of a child process."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], check=True, capture_output=True, text=True)
    return time.perf_counter() - start, int(out.stdout.split()[-1]) / 1024


def main():
    ap = parser(__doc__, data=False)
    ap.add_argument("--models", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--baseline-models", type=int, default=500)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--format", choices=("harness", "leaderboard"), default="harness")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="import-bench-"))
    src = work / "harness"
    start = time.perf_counter()
    if not src.exists():
        records = write_folder(src, args.models, args.tasks, args.questions,
                               prefix="leaderboard_" if args.format == "leaderboard" else "")
    else:
        records = args.models * args.tasks * args.questions
    write_s = time.perf_counter() - start
    size = sum(f.stat().st_size for f in src.rglob("*"))
    jeirt = Path(sys.executable).with_name("jeirt")
    base_s, base_mb = timed_child([sys.executable, "-c", BASELINE, str(src), str(args.baseline_models * args.tasks),
                                   str(work / "baseline.parquet")])
    ours_s, ours_mb = timed_child([str(jeirt), "data", "import", args.format, str(src), "--out", str(work / "long")])
    report = json.loads((work / "long" / "import_report.json").read_text())
    write_json(args.out, {
        "format": args.format, "models": args.models, "tasks": args.tasks, "questions_per_task": args.questions,
        "records": records,
        "folder_bytes": size, "write_seconds": write_s,
        "import_seconds": ours_s, "import_peak_rss_mib": ours_mb, "import_records_per_s": records / ours_s,
        "imported": {k: report[k] for k in ("models", "questions", "responses", "files")},
        "skipped": len(report["skipped"]),
        "baseline": {"what": "pandas read_json(lines=True) per file + concat", "models": args.baseline_models,
                     "seconds": base_s, "peak_rss_mib": base_mb,
                     "records_per_s": args.baseline_models * args.tasks * args.questions / base_s},
    })
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
