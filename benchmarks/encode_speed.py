"""Ray Data encoding throughput against a plain single-process SentenceTransformer.encode.

    python benchmarks/encode_speed.py [--data DIR] --out results/encode_speed.json [--n 1500]

Both sides encode the same first --n distinct question texts with the same encoder, from an
empty temporary cache (so nothing is skipped); the Ray side is then run a second time, when
everything is cached. The plain side uses every CPU thread torch has; the Ray side runs
--replicas actors with --threads threads each on a local cluster started for the run.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

from _common import dataset_path, parser, write_json
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder


def main():
    ap = parser(__doc__)
    ap.add_argument("--n", type=int, default=1500, help="number of distinct texts")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per replica")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    texts = list(dict.fromkeys(map(str, data.texts)))[:args.n]

    encoder = make_encoder(args.encoder)
    encoder.encode(texts[:8])  # load the weights outside the timing
    start = time.perf_counter()
    plain = encoder.encode(texts, batch_size=args.batch_size)
    plain_s = time.perf_counter() - start

    import ray

    from jeirt_ray.distributed.encode import encode_with_ray
    ray.init(address="local", num_cpus=max(2, torch.get_num_threads()), include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        vecs = encode_with_ray(args.encoder, texts, cache, replicas=args.replicas, batch_size=args.batch_size,
                               threads_per_replica=args.threads, progress=False)
        ray_s = time.perf_counter() - start
        start = time.perf_counter()
        encode_with_ray(args.encoder, texts, cache, replicas=args.replicas, progress=False)
        cached_s = time.perf_counter() - start
    ray.shutdown()
    write_json(args.out, {
        "data": data.name, "n_texts": len(texts), "encoder": encoder.encoder_id, "replicas": args.replicas,
        "threads_per_replica": args.threads,
        "plain_rows_per_s": len(texts) / plain_s, "ray_rows_per_s": len(texts) / ray_s,
        "ratio_vs_plain": plain_s / ray_s, "cached_rerun_seconds": cached_s,
        "cached_rerun_fraction": cached_s / ray_s,
        "max_abs_diff_vs_plain": float(np.abs(vecs - plain).max()),
        "seconds": {"plain": plain_s, "ray_first": ray_s, "ray_cached": cached_s},
    })


if __name__ == "__main__":
    main()
