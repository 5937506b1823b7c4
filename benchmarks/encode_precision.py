"""Faster encoders against the fp32 PyTorch one: speed, and how close the vectors are.

    python benchmarks/encode_precision.py [--data DIR] --out results/encode_precision.json \
        [--encoder all-MiniLM-L6-v2] [--precision int8 onnx onnx-int8] [--n 400] [--threads 1]

Each variant (`NAME+<precision>`: torch's dynamic int8, ONNX Runtime fp32, ONNX Runtime with
int8 weights) and the fp32 reference encode the same first --n distinct question texts (of
--data, default mmlu_pro) in this process, with `--threads` threads (1: a served encoder's
`encoder_threads`), weights loaded (exported, quantised) outside the timing: one query at a
time (the served path at one client: p50 and p99 of --single queries) and batched (questions
per second). Reported per variant: those figures, the speed-ups over fp32, and the cosine of
each vector to its fp32 vector (mean, 1st percentile, minimum). Whether downstream accuracy holds
is a separate run: `jeirt evaluate --encoder NAME+<precision>` against `--encoder NAME`.

JSON: `fp32` and `variants["<precision>"]` with `single_p50_ms`, `single_p99_ms`,
`questions_per_s`; the variants also `single_speedup`, `batched_speedup`, `cosine_mean`,
`cosine_p1`, `cosine_min`, `encoder_id`; `fastest_single` (the precision with the lowest
single-query p50 among those whose cosine minimum is at least 0.95, fp32 included).
"""

from __future__ import annotations

import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.encoders.sentence import INT8_MIN_COSINE


def measure(encoder, texts, batch_size: int, single: int) -> tuple[np.ndarray, dict]:
    encoder.encode(texts[:8])  # load (export, quantise) outside the timing
    times = []
    for text in texts[:single]:
        start = time.perf_counter()
        encoder.encode([text])
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    vecs = encoder.encode(texts, batch_size=batch_size)
    return vecs, {"single_p50_ms": float(np.median(times) * 1000), "single_p99_ms": float(np.percentile(times, 99) * 1000),
                  "questions_per_s": len(texts) / (time.perf_counter() - start)}


def main():
    import torch
    ap = parser(__doc__)
    ap.add_argument("--precision", nargs="+", default=["int8", "onnx", "onnx-int8"])
    ap.add_argument("--n", type=int, default=400, help="number of distinct texts")
    ap.add_argument("--single", type=int, default=100, help="texts encoded one at a time")
    ap.add_argument("--threads", type=int, default=1, help="torch (and ONNX Runtime) threads")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    texts = list(dict.fromkeys(map(str, data.texts)))[:args.n]
    base, fp32 = measure(make_encoder(args.encoder), texts, args.batch_size, args.single)
    variants = {}
    for precision in args.precision:
        enc = make_encoder(f"{args.encoder}+{precision}")
        vecs, figures = measure(enc, texts, args.batch_size, args.single)
        cos = np.sum(base * vecs, 1) / (np.linalg.norm(base, axis=1) * np.linalg.norm(vecs, axis=1))
        variants[precision] = {**figures, "encoder_id": enc.encoder_id,
                               "single_speedup": fp32["single_p50_ms"] / figures["single_p50_ms"],
                               "batched_speedup": figures["questions_per_s"] / fp32["questions_per_s"],
                               "cosine_mean": float(cos.mean()), "cosine_p1": float(np.percentile(cos, 1)),
                               "cosine_min": float(cos.min())}
        print(f"{precision}: one query {figures['single_p50_ms']:.1f} ms (fp32 {fp32['single_p50_ms']:.1f}), batched "
              f"{figures['questions_per_s']:.1f}/s (fp32 {fp32['questions_per_s']:.1f}), cosine min {cos.min():.4f}",
              flush=True)
    faithful = {"fp32": fp32["single_p50_ms"]} | {p: v["single_p50_ms"] for p, v in variants.items()
                                                    if v["cosine_min"] >= INT8_MIN_COSINE}
    write_json(args.out, {"data": data.name, "n_texts": len(texts), "encoder": args.encoder, "threads": args.threads,
                          "fp32": fp32, "variants": variants, "fastest_single": min(faithful, key=faithful.get)})


if __name__ == "__main__":
    main()
