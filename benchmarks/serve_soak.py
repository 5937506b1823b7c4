"""Soak: steady loopback load on the service for a long stretch; failures, memory, latency.

    python benchmarks/serve_soak.py [--data DIR] --out results/serve_soak.json [--minutes 10]

Deploys deployments/local.yaml as serve_load.py does and sends the dataset's test questions to
POST /v1/route from `--concurrency` clients for `--minutes`. Every `--sample-s` seconds it reads
the resident memory (RSS) of every Serve process (controller, proxy, each replica). Reported: the
failed requests (target: none), each process's RSS at the start and end and its slope in MiB per
minute (least squares over the run after the first minute, the warm-up; target: flat, i.e. well
under 1 MiB/min), and p50/p99 per minute (target: the last minute's p99 within 1.5 x the first's).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import drive, registered_space, service, summary, test_texts


def serve_processes() -> dict[str, int]:
    """{label: pid} of Serve's controller, proxy and replicas."""
    import ray
    from ray.util.state import list_actors
    out = {}
    for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")]):
        if a.class_name.startswith(("ServeController", "ProxyActor", "ServeReplica")):
            out[f"{a.class_name.replace('ServeReplica:', '')}#{a.pid}"] = a.pid
    return out


def main():
    ap = parser(__doc__)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads of the encoder replica")
    args = ap.parse_args()
    import psutil

    data, prep, texts = test_texts(dataset_path(args.data, "mmlu_pro"), args.encoder, args.split_seed)
    with registered_space(prep) as home, service(home, args.encoder, args.threads) as url:
        asyncio.run(drive(url, texts, 4, 32))  # warm-up
        procs = {label: psutil.Process(pid) for label, pid in serve_processes().items()}
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label in procs}
        stop = threading.Event()
        t0 = time.perf_counter()

        def sample():
            while not stop.is_set():
                for label, p in procs.items():
                    try:
                        samples[label].append((time.perf_counter() - t0, p.memory_info().rss / 2**20))
                    except psutil.Error:
                        samples[label].append((time.perf_counter() - t0, float("nan")))
                stop.wait(args.sample_s)
        sampler = threading.Thread(target=sample)
        sampler.start()
        records = asyncio.run(drive(url, texts, args.concurrency, seconds=args.minutes * 60))
        stop.set()
        sampler.join()

    start = min(r[0] for r in records)
    minutes = []
    for m in range(int(np.ceil(args.minutes))):
        window = [r for r in records if m * 60 <= r[0] - start < (m + 1) * 60]
        if window:
            minutes.append({"minute": m + 1, **summary(window, args.concurrency)})
    memory = {}
    for label, series in samples.items():
        t, rss = np.array(series).T
        keep = (t >= 60) & np.isfinite(rss) if (t >= 60).sum() >= 3 else np.isfinite(rss)
        slope = float(np.polyfit(t[keep] / 60, rss[keep], 1)[0]) if keep.sum() >= 2 else float("nan")
        memory[label] = {"rss_start_mib": float(rss[0]), "rss_end_mib": float(rss[-1]),
                         "slope_mib_per_min": slope, "samples": len(series)}
    total = summary(records, args.concurrency)
    p99_ratio = minutes[-1]["p99_ms"] / minutes[0]["p99_ms"]
    worst = max(abs(m["slope_mib_per_min"]) for m in memory.values())
    write_json(args.out, {
        "data": data.name, "encoder": args.encoder, "minutes": args.minutes, "concurrency": args.concurrency,
        "total": total, "per_minute": minutes, "memory": memory,
        "failed_requests": total["failed"], "worst_rss_slope_mib_per_min": worst,
        "last_over_first_minute_p99": p99_ratio,
        "targets_met": {"no_failures": total["failed"] == 0, "memory_flat_under_1_mib_per_min": worst < 1.0,
                        "p99_stable_within_1_5x": p99_ratio <= 1.5}})


if __name__ == "__main__":
    main()
