"""The GPU paths, end to end, in one command (needs a CUDA GPU; on CPU it says so and exits 2).

    python benchmarks/gpu_check.py [--data DIR] --out results/gpu_check.json [--encoder all-MiniLM-L6-v2]

1. Ray Data encoding with one GPU per replica (fp16), against a plain fp32 GPU encode of the
   same texts: throughput, and the cosine of each vector to the fp32 one.
2. Ray Train with nccl: the fixed JE-IRT configuration on 1 worker with a GPU (bf16 autocast), and
   on as many workers as GPUs; validation loss against the CPU run.
3. End-to-end fine-tuning of the encoder's top 2 layers on a GPU under Ray Train (nccl, bf16),
   through the public API (jr.train(..., workers=N, gpus=True, finetune="top-2")).
4. The Serve Encoder deployment on a GPU (production's placement): a fine-tuned space routed
   over HTTP, latency of 50 sequential requests.
Each step records its figures or its error; the exit status is 1 if any step failed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from _common import dataset_path, parser, write_json

ROOT = Path(__file__).resolve().parents[1]


def step(results: dict, name: str, fn) -> None:
    start = time.perf_counter()
    try:
        results[name] = {"ok": True, **fn()}
    except Exception as e:  # a GPU check reports every step, whatever fails
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    results[name]["seconds"] = time.perf_counter() - start
    print(json.dumps({name: {k: v for k, v in results[name].items() if k != "traceback"}}, default=str), flush=True)


def main():
    ap = parser(__doc__)
    ap.add_argument("--n", type=int, default=4000, help="questions encoded in step 1")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False); on CPU the test suite covers "
              "the same code paths", file=sys.stderr)
        sys.exit(2)
    import ray

    from jeirt_ray.data import load_data
    from jeirt_ray.distributed.encode import encode_with_ray
    from jeirt_ray.distributed.train import ray_fit
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.model.train import fit
    from jeirt_ray.experiments.selection import fixed_config

    gpus = torch.cuda.device_count()
    home = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    os.environ.update(JEIRT_HOME=str(home), MLFLOW_TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}")
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    texts = list(dict.fromkeys(map(str, data.texts)))[:args.n]
    ray.init(log_to_driver=False)
    results: dict = {"gpus": gpus, "device": torch.cuda.get_device_name(0), "encoder": args.encoder}

    def ray_data_encode():
        plain = make_encoder(args.encoder)
        plain.encode(texts[:8])
        start = time.perf_counter()
        ref = plain.encode(texts, batch_size=128)
        plain_s = time.perf_counter() - start
        start = time.perf_counter()
        vecs = encode_with_ray(f"{args.encoder}+fp16", texts, home / "cache", replicas=gpus, gpus_per_replica=1,
                               batch_size=128, progress=False)
        ray_s = time.perf_counter() - start
        cos = np.sum(ref * vecs, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(vecs, axis=1)
        return {"n": len(texts), "plain_fp32_q_per_s": len(texts) / plain_s, "ray_fp16_q_per_s": len(texts) / ray_s,
                "replicas": gpus, "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}

    step(results, "ray_data_encode_gpu", ray_data_encode)

    prep = prepare(data, make_encoder(args.encoder), seed=0, cache_root=home / "cache", progress=False)
    config = fixed_config("jeirt").model_copy(update={"max_epochs": 10})
    fit_args = (prep.X, data.n_models, prep.pairs("train"), prep.pairs("val"), config)

    def ray_train_nccl():
        cpu = fit(*fit_args, progress=False)
        out = {"cpu_val_loss": cpu.best_val_loss, "cpu_seconds": cpu.seconds}
        for workers in sorted({1, gpus}):
            r = ray_fit(*fit_args, workers=workers, use_gpu=True, storage=home / "ray", name=f"nccl-{workers}",
                        progress=False)
            out[f"gpu_{workers}_workers_val_loss"], out[f"gpu_{workers}_workers_seconds"] = r.best_val_loss, r.seconds
        return out

    step(results, "ray_train_nccl_bf16", ray_train_nccl)

    def finetune_gpu():  # the public API, as a notebook or RayJob would call it
        import jeirt_ray as jr
        space = jr.train(data, encoder=args.encoder, search=False, members=1, workers=gpus, gpus=True,
                         finetune="top-2", progress=False)
        results["_space"] = space
        routed = space.route(texts[:2])
        return {**{k: space.metadata["finetune"][k] for k in ("layers", "best_val_loss", "best_epoch", "train_seconds",
                                                             "hidden_state_seconds")},
                "routed": [r["chosen"] for r in routed]}

    step(results, "finetune_ray_train_gpu", finetune_gpu)

    def serve_encoder_gpu():
        import httpx
        import yaml

        import jeirt_ray as jr
        from jeirt_ray.serving.deployment.deploy import check_registry, deploy, load_config
        jr.register(results.pop("_space"), "gpu-check", alias="champion")
        raw = yaml.safe_load((ROOT / "deployments" / "production.yaml").read_text())
        app = raw["applications"][0]
        app["args"].update(model="gpu-check", encoder="models:/gpu-check@champion", tracking_uri=None)
        for d in app["deployments"]:
            d.pop("autoscaling_config", None)
            d["num_replicas"] = 1
            if d["name"] == "Encoder":
                d["ray_actor_options"] = {"num_gpus": 1, "num_cpus": 1}
            else:
                d["ray_actor_options"] = {"num_cpus": 0.5}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            raw["http_options"] = {"host": "127.0.0.1", "port": s.getsockname()[1]}
        raw["proxy_location"] = "HeadOnly"
        path = home / "serve.yaml"
        path.write_text(yaml.safe_dump(raw))
        cfg = load_config(path)
        check_registry(cfg)
        url = deploy(cfg, timeout_s=300)
        lat = []
        with httpx.Client(timeout=60) as client:
            for t in texts[:50]:
                start = time.perf_counter()
                r = client.post(f"{url}/v1/route", json={"query": t})
                r.raise_for_status()
                lat.append(time.perf_counter() - start)
        return {"requests": len(lat), "p50_ms": float(np.median(lat) * 1000), "p95_ms": float(np.percentile(lat, 95) * 1000)}

    step(results, "serve_encoder_gpu", serve_encoder_gpu)
    results.pop("_space", None)
    write_json(args.out, results)
    sys.exit(0 if all(v.get("ok") for v in results.values() if isinstance(v, dict)) else 1)


if __name__ == "__main__":
    main()
