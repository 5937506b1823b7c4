"""Scale: training memory and epoch time as LLMs and questions grow, and routing latency at
100 / 1,000 / 10,000 LLMs.

    python benchmarks/scale.py --out results/scale.json [--sizes 1250x25000 2500x50000 5000x100000]

Data: jeirt_ray.data.synthetic.sparse_scale (SYNTHETIC): benchmarks of 2,000 questions, each LLM
evaluated on 3 of them, so observed pairs grow 2x per size step while LLMs x questions grows 4x. Every size is
trained for --epochs epochs in a fresh process (its peak RSS is the memory figure); the largest
also on Ray Train with 2 workers (peak = the summed PSS of the process and the local Ray cluster
it starts, sampled; PSS splits shared pages such as the object store between the processes). Epoch time is the median of the epochs after the first. A linear fit of epoch time on
observed pairs (and on LLMs x questions, for contrast) says which one the cost follows.
Targets: peak memory under 8 GB; matrix-vector part of routing under 1 ms at 10,000 LLMs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import resource
import tempfile
import threading
import time

import numpy as np

from _common import write_json

DIM = 128


def _data(n_models, n_questions):
    from jeirt_ray.data.synthetic import sparse_scale
    from jeirt_ray.model.train import Pairs
    # benchmarks of 2,000 questions each: pairs = LLMs x 3 x 2,000 grow with LLMs alone
    X, q, m, y = sparse_scale(n_models, n_questions, n_benchmarks=max(3, n_questions // 2000), seed=0)
    val = np.random.default_rng(1).random(len(q)) < 0.01
    return X, Pairs.from_numpy(q[~val], m[~val], y[~val]), Pairs.from_numpy(q[val], m[val], y[val])


def _config(epochs):
    from jeirt_ray.model.train import TrainConfig
    return TrainConfig(kind="jeirt", dim=DIM, max_epochs=epochs, patience=epochs, lr=1e-3)


def single_process(n_models, n_questions, epochs):
    """Runs in a fresh process: generate, train, report epoch times and peak RSS."""
    from jeirt_ray.model.train import fit
    start = time.perf_counter()
    X, train, val = _data(n_models, n_questions)
    gen = time.perf_counter() - start
    r = fit(X, n_models, train, val, _config(epochs), progress=False)
    secs = np.diff([0.0] + [h["seconds"] for h in r.history])
    return {"llms": n_models, "questions": n_questions, "pairs": len(train), "generate_seconds": gen,
            "epoch_seconds": [float(s) for s in secs], "epoch_seconds_steady": float(np.median(secs[1:] if len(secs) > 1 else secs)),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "val_loss": r.best_val_loss}


def _descendants(root: int) -> set[int]:
    """`root` and every process started under it (a local Ray cluster's GCS, raylet and workers)."""
    children: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(pid))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def _tree_pss_gb() -> float:
    """Memory of this process and every process under it (the local Ray cluster it started), as
    PSS (proportional set size): pages shared between processes (Ray's object store, mapped by
    every worker) are divided among them instead of counted once per process as RSS would."""
    total = 0
    for pid in _descendants(os.getpid()):
        try:
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 2**20


def ray_two_workers(n_models, n_questions, epochs):
    import ray

    from jeirt_ray.distributed.train import ray_fit
    X, train, val = _data(n_models, n_questions)
    ray.init(address="local", num_cpus=2, log_to_driver=False)
    peak, stop = [0.0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_pss_gb())
            time.sleep(0.5)
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as storage:
        r = ray_fit(X, n_models, train, val, _config(epochs), workers=2, storage=storage, name="scale",
                    progress=False, report_every_s=1e9)  # one checkpoint, at the end
    stop.set()
    ray.shutdown()
    secs = np.diff([0.0] + [h["seconds"] for h in r.history])
    return {"llms": n_models, "questions": n_questions, "pairs": len(train), "workers": 2,
            "epoch_seconds": [float(s) for s in secs], "epoch_seconds_steady": float(np.median(secs[1:])),
            "peak_pss_gb_all_ray_processes": peak[0], "val_loss": r.best_val_loss}


def routing_latency(n_llms: int, reps: int = 2000) -> dict:
    import torch

    from jeirt_ray.model.modules import JEIRT
    torch.manual_seed(0)
    mod = JEIRT(384, n_llms, dim=DIM).eval()
    x = torch.randn(1, 384)
    with torch.no_grad():
        u, norm = mod.split(mod.question_vectors(x))
        W = mod.models.weight
        for _ in range(50):
            u @ W.T - norm[:, None]
        t = []
        for _ in range(reps):
            s = time.perf_counter()
            (u @ W.T - norm[:, None]).argmax()
            t.append(time.perf_counter() - s)
        full = []
        for _ in range(reps // 4):
            s = time.perf_counter()
            mod.score_all(x).argmax()
            full.append(time.perf_counter() - s)
    return {"llms": n_llms, "dim": DIM, "matvec_p50_ms": float(np.median(t) * 1000),
            "matvec_p99_ms": float(np.percentile(t, 99) * 1000),
            "adapter_and_matvec_p50_ms": float(np.median(full) * 1000)}


def _fit(xs, ys):
    slope, intercept = np.polyfit(xs, ys, 1)
    pred = slope * np.asarray(xs) + intercept
    ss = float(np.sum((np.asarray(ys) - pred) ** 2))
    r2 = 1 - ss / float(np.sum((np.asarray(ys) - np.mean(ys)) ** 2))
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", nargs="+", default=["1250x25000", "2500x50000", "5000x100000"])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--parts", nargs="+", default=["routing", "single", "ray"], choices=["routing", "single", "ray"])
    args = ap.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes]

    routing = [routing_latency(n) for n in (100, 1000, 10000)] if "routing" in args.parts else []
    for r in routing:
        print(r, flush=True)
    single = []
    ctx = multiprocessing.get_context("spawn")
    for n_models, n_questions in (sizes if "single" in args.parts else []):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            single.append(pool.submit(single_process, n_models, n_questions, args.epochs).result())
        print(single[-1], flush=True)
    ray_row = None
    if "ray" in args.parts:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            ray_row = pool.submit(ray_two_workers, *sizes[-1], args.epochs).result()
        print(ray_row, flush=True)
    out = {"data": "SYNTHETIC sparse_scale (benchmarks of 2,000 questions, 3 per LLM)", "dim": DIM,
           "parts": args.parts, "single_process": single, "ray_train_2_workers": ray_row, "routing": routing}
    if len(single) >= 2:
        pairs = [r["pairs"] for r in single]
        times = [r["epoch_seconds_steady"] for r in single]
        grid = [r["llms"] * r["questions"] for r in single]
        out |= {"epoch_time_vs_pairs": _fit(pairs, times), "epoch_time_vs_llms_x_questions": _fit(grid, times),
                "growth": {"pairs": pairs[-1] / pairs[0], "llms_x_questions": grid[-1] / grid[0],
                           "epoch_time": times[-1] / times[0]}}
    peaks = [r["peak_rss_gb"] for r in single] + ([ray_row["peak_pss_gb_all_ray_processes"]] if ray_row else [])
    out["peak_memory_gb"] = max(peaks) if peaks else None
    out["peak_memory_under_8gb"] = bool(peaks) and max(peaks) < 8
    if routing:
        out["matvec_under_1ms_at_10000"] = routing[-1]["matvec_p50_ms"] < 1.0
    write_json(args.out, out)


if __name__ == "__main__":
    main()
