"""Serving load and latency against the encoder's own speed, in one run, over loopback.

    python benchmarks/serve_load.py [--data DIR] --out results/serve_load.json

Deploys deployments/local.yaml (a space trained here for a few epochs and registered in a
temporary MLflow database; the real encoder) and sends the test questions of the dataset to
POST /v1/route at concurrency 1, 8 and 32, for each encoder placement (`--placements`: the
Encoder deployment of its own, and the encoder inside the Router replica; the first one listed
is judged against the targets). Baselines measured in the same run, in this process,
while the service is idle: the encoder's single-query forward time (p50) and its offline
batched throughput (batches of 32). Targets: at concurrency 1, p50 <= 1.5 x encoder p50 + 5 ms;
at concurrency 32, throughput >= 60% of the offline batched throughput; no failed request.
"""

from __future__ import annotations

import asyncio
import os

from _common import dataset_path, parser, write_json
from _serving import drive, encoder_alone, placed, registered_space, service, summary, test_texts


def main():
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=256, help="requests per concurrency level (64 at 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads of the encoder replica")
    ap.add_argument("--placements", default="router,deployment",
                    help="encoder placements to measure (args.encoder_placement), comma-separated")
    args = ap.parse_args()

    data, prep, texts = test_texts(dataset_path(args.data, "mmlu_pro"), args.encoder, args.split_seed)
    with registered_space(prep) as home:
        # baselines, in this process, before the service exists
        single_ms, batched_rps = encoder_alone(args.encoder, args.threads, texts[:64], texts, batch_size=32)
        baseline = {"encoder_single_p50_ms": single_ms, "encoder_batched_rps": batched_rps, "threads": args.threads}
        print(baseline, flush=True)

        by_placement = {}
        for placement in args.placements.split(","):
            with service(home, args.encoder, args.threads, placed(placement)) as url:
                asyncio.run(drive(url, texts, 4, 16))  # warm-up
                levels = by_placement[placement] = []
                for c in (1, 8, 32):
                    levels.append(summary(asyncio.run(drive(url, texts, c, 64 if c == 1 else args.requests)), c))
                    print(placement, levels[-1], flush=True)
    placement = args.placements.split(",")[0]
    levels = by_placement[placement]
    c1, c32 = levels[0], levels[-1]
    targets = {"c1_p50_limit_ms": 1.5 * baseline["encoder_single_p50_ms"] + 5,
               "c32_throughput_floor_rps": 0.6 * baseline["encoder_batched_rps"]}
    write_json(args.out, {
        "data": data.name, "encoder": args.encoder, "queries": len(texts), "baseline": baseline,
        "placement": placement, "levels": levels, "levels_by_placement": by_placement,
        "targets": targets, "c1_p50_within_target": c1["p50_ms"] <= targets["c1_p50_limit_ms"],
        "c32_throughput_ratio": c32["throughput_rps"] / baseline["encoder_batched_rps"],
        "c32_within_target": c32["throughput_rps"] >= targets["c32_throughput_floor_rps"],
        "failed_requests": sum(r["failed"] for rows in by_placement.values() for r in rows)})


if __name__ == "__main__":
    main()
