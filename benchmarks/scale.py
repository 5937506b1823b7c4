"""Scale: training memory and epoch time as LLMs and questions grow, routing latency at
100 / 1,000 / 10,000 LLMs, and a measured model of memory, epoch time and object-store traffic
that predicts a larger size on a cluster.

    python benchmarks/scale.py --out results/scale.json [--sizes ...] [--ray-sizes ...] [--predict 100000x1000000]

Data: jeirt_ray.data.synthetic.sparse_scale (SYNTHETIC): benchmarks of 2,000 questions, each LLM
evaluated on 3 of them, so observed pairs grow 2x per size step while LLMs x questions grows 4x.
Every --sizes size is trained for --epochs epochs in a fresh process (its peak RSS is the memory
figure); every --ray-sizes size on Ray Train with 2 workers in a fresh process (peak = the summed
PSS of the process and the local Ray cluster it starts, sampled; PSS splits shared pages such as
the object store between the processes; each role's private memory, USS, at that peak). Epoch
time is the median of the epochs after the first. A linear fit of epoch time on observed pairs
(and on LLMs x questions, for contrast) says which one the cost follows. The scaling model:
lines through the first two Ray sizes, checked at the others, then used for --predict.
Targets: peak memory under 8 GB at 5,000 x 100,000; matrix-vector part of routing under 1 ms at
10,000 LLMs.
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


def _role(pid: int) -> str:
    """What a process of the local cluster is, from its command line."""
    if pid == os.getpid():
        return "driver"
    try:
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        return "gone"
    for key, role in (("RayTrainWorker", "train workers"), ("TrainController", "train controller"),
                      ("raylet", "raylet"), ("gcs_server", "gcs"), ("dashboard", "dashboard"),
                      ("default_worker", "idle ray workers")):
        if key in cmd:
            return role
    return "other ray processes"


def _tree_memory_gb() -> tuple[float, dict[str, float]]:
    """Memory of this process and every process under it (the local Ray cluster it started):
    the PSS total (proportional set size: pages shared between processes, such as Ray's object
    store mapped by every worker, divided among them instead of counted once per process as RSS
    would) and each role's USS (its private pages: what it holds beyond the shared arrays)."""
    pss, uss = 0.0, {}
    for pid in _descendants(os.getpid()):
        try:
            fields = {k: int(v.split()[0]) for k, v in
                      (line.split(":", 1) for line in open(f"/proc/{pid}/smaps_rollup") if ":" in line)
                      if k in ("Pss", "Private_Clean", "Private_Dirty")}
        except (OSError, ValueError):
            continue
        pss += fields.get("Pss", 0) / 2**20
        role = _role(pid)
        uss[role] = uss.get(role, 0.0) + (fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / 2**20
    return pss, uss


def ray_two_workers(n_models, n_questions, epochs):
    """Runs in a fresh process: Ray Train with 2 workers on a local cluster of 2 CPUs; the peak
    PSS of every process, each role's USS at that peak, and the bytes of the data that the
    object store holds once (ray_fit puts it there for every worker to map)."""
    import ray

    from jeirt_ray.distributed.train import ray_fit
    X, train, val = _data(n_models, n_questions)
    data_bytes = X.nbytes + sum(t.numpy().nbytes for p in (train, val) for t in (p.q, p.m, p.y))
    ray.init(address="local", num_cpus=2, log_to_driver=False)
    peak, stop = [(0.0, {})], threading.Event()

    def sample():
        while not stop.is_set():
            now = _tree_memory_gb()
            if now[0] > peak[0][0]:
                peak[0] = now
            time.sleep(0.5)
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as storage:
        r = ray_fit(X, n_models, train, val, _config(epochs), workers=2, storage=storage, name="scale",
                    progress=False, report_every_s=1e9)  # one checkpoint, at the end
    stop.set()
    ray.shutdown()
    secs = np.diff([0.0] + [h["seconds"] for h in r.history])
    return {"llms": n_models, "questions": n_questions, "pairs": len(train), "workers": 2,
            "data_gb": data_bytes / 2**30, "x_gb": X.nbytes / 2**30, "epoch_seconds": [float(s) for s in secs],
            "epoch_seconds_steady": float(np.median(secs[1:])), "peak_pss_gb_all_ray_processes": peak[0][0],
            "uss_gb_at_peak": {k: round(v, 3) for k, v in sorted(peak[0][1].items())}, "val_loss": r.best_val_loss}


def scaling_model(rows: list[dict], fit_on: int, target: tuple[int, int]) -> dict:
    """Lines through the first `fit_on` Ray runs (memory and epoch time against observed pairs),
    checked at the other runs, then used for `target` (LLMs, questions) with the generator's
    sparsity (each LLM on 3 benchmarks of 2,000 questions). On a cluster of one worker per node,
    a worker node holds the data once in its object store plus one worker's private memory."""
    base, checks = rows[:fit_on], rows[fit_on:]
    pairs = [r["pairs"] for r in base]

    def line(values):
        return _fit(pairs, values)

    def at(f, n):
        return f["slope"] * n + f["intercept"]

    worker = line([r["uss_gb_at_peak"].get("train workers", 0) / r["workers"] for r in base])
    total = line([r["peak_pss_gb_all_ray_processes"] for r in base])
    epoch = line([r["epoch_seconds_steady"] for r in base])
    # bytes of the object-store copy: the pairs' arrays per pair, the question vectors per question
    data_per_pair = float(np.mean([(r["data_gb"] - r["x_gb"]) / r["pairs"] for r in base]))
    x_per_question = float(np.mean([r["x_gb"] / r["questions"] for r in base]))
    checked = [{"llms": r["llms"], "questions": r["questions"], "pairs": r["pairs"],
                "peak_pss_gb": {"predicted": at(total, r["pairs"]), "measured": r["peak_pss_gb_all_ray_processes"]},
                "worker_uss_gb": {"predicted": at(worker, r["pairs"]),
                                  "measured": r["uss_gb_at_peak"].get("train workers", 0) / r["workers"]},
                "epoch_seconds": {"predicted": at(epoch, r["pairs"]), "measured": r["epoch_seconds_steady"]}}
               for r in checks]
    for c in checked:
        for v in c.values():
            if isinstance(v, dict):
                v["error"] = v["predicted"] / v["measured"] - 1 if v["measured"] else None
    n_llms, n_questions = target
    n_pairs = n_llms * 3 * 2000
    data_gb = data_per_pair * n_pairs + x_per_question * n_questions
    return {"fitted_on": [(r["llms"], r["questions"]) for r in base], "lines": {
                "worker_uss_gb_vs_pairs": worker, "peak_pss_gb_vs_pairs_2_workers_1_node": total,
                "epoch_seconds_vs_pairs_2_workers": epoch, "data_gb_per_pair": data_per_pair,
                "data_gb_per_question": x_per_question},
            "checks": checked,
            "target": {"llms": n_llms, "questions": n_questions, "pairs": n_pairs, "data_gb": data_gb,
                       "worker_private_gb": at(worker, n_pairs),
                       "worker_node_gb": data_gb + at(worker, n_pairs),
                       "object_store_traffic_gb_per_run": {"per_node": data_gb},
                       "epoch_seconds_2_workers": at(epoch, n_pairs),
                       # DDP's speed-up beyond 2 workers is not measured here: linear is the best case
                       "epoch_seconds_if_linear_in_workers": {w: at(epoch, n_pairs) * 2 / w for w in (8, 32, 128)}}}


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
    ap.add_argument("--ray-sizes", nargs="+", default=["625x12500", "1250x25000", "2500x50000", "5000x100000"],
                    help="sizes of the Ray Train runs; the model is fitted on the first two, checked on the rest")
    ap.add_argument("--predict", default="100000x1000000", help="LLMs x questions the model predicts")
    ap.add_argument("--parts", nargs="+", default=["routing", "single", "ray"], choices=["routing", "single", "ray"])
    args = ap.parse_args()

    def size(text):
        return tuple(int(v) for v in text.split("x"))
    sizes, ray_sizes = [size(s) for s in args.sizes], [size(s) for s in args.ray_sizes]

    routing = [routing_latency(n) for n in (100, 1000, 10000)] if "routing" in args.parts else []
    for r in routing:
        print(r, flush=True)
    single = []
    ctx = multiprocessing.get_context("spawn")
    for n_models, n_questions in (sizes if "single" in args.parts else []):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            single.append(pool.submit(single_process, n_models, n_questions, args.epochs).result())
        print(single[-1], flush=True)
    ray_rows = []
    for n_models, n_questions in (ray_sizes if "ray" in args.parts else []):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            ray_rows.append(pool.submit(ray_two_workers, n_models, n_questions, args.epochs).result())
        print(ray_rows[-1], flush=True)
    ray_row = ray_rows[-1] if ray_rows else None
    out = {"data": "SYNTHETIC sparse_scale (benchmarks of 2,000 questions, 3 per LLM)", "dim": DIM,
           "parts": args.parts, "single_process": single, "ray_train_2_workers": ray_row,
           "ray_train_2_workers_by_size": ray_rows, "routing": routing}
    if len(ray_rows) >= 3:
        out["scaling_model"] = scaling_model(ray_rows, 2, size(args.predict))
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
