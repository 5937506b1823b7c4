"""A reduced-precision encoder against the fp32 one: speed, and how close the vectors are.

    python benchmarks/encode_precision.py [--data DIR] --out results/encode_precision.json \
        [--encoder all-mpnet-base-v2] [--precision int8] [--n 400]

Both encode the same first --n distinct question texts (of --data, default mmlu_pro) in this
process, with every CPU thread torch has, weights loaded outside the timing. Reported: questions
per second of each, their ratio, and the cosine of each reduced-precision vector to its fp32
vector (mean, 1st percentile, minimum). Whether downstream accuracy holds is a separate run:
`jeirt evaluate --encoder NAME+int8` against `--encoder NAME` on the same split.
"""

from __future__ import annotations

import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder


def timed(encoder, texts, batch_size):
    encoder.encode(texts[:8])  # load (and quantise) the weights outside the timing
    start = time.perf_counter()
    vecs = encoder.encode(texts, batch_size=batch_size)
    return vecs, time.perf_counter() - start


def main():
    ap = parser(__doc__)
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--n", type=int, default=400, help="number of distinct texts")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    texts = list(dict.fromkeys(map(str, data.texts)))[:args.n]
    base, base_s = timed(make_encoder(args.encoder), texts, args.batch_size)
    low_enc = make_encoder(f"{args.encoder}+{args.precision}")
    low, low_s = timed(low_enc, texts, args.batch_size)
    cos = np.sum(base * low, 1) / (np.linalg.norm(base, axis=1) * np.linalg.norm(low, axis=1))
    write_json(args.out, {
        "data": data.name, "n_texts": len(texts), "encoder": args.encoder, "precision": args.precision,
        "encoder_id": low_enc.encoder_id,
        "fp32_questions_per_s": len(texts) / base_s, f"{args.precision}_questions_per_s": len(texts) / low_s,
        "speedup": base_s / low_s, "cosine_mean": float(cos.mean()), "cosine_p1": float(np.percentile(cos, 1)),
        "cosine_min": float(cos.min())})


if __name__ == "__main__":
    main()
