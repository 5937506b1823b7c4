"""The gateway against what users compare it with, side by side in one run: a fast local mock
upstream (OpenAI's shape), called directly, through jeirt's gateway and through LiteLLM's proxy.

    python benchmarks/gateway_bench.py --out F.json [--litellm PATH] [--clients 1 8 32 64]
        [--requests 300] [--ingress proxy haproxy] [--no-minilm] [--data DIR]

Every system forwards to the same upstream (tests/upstream.py, no delay, streamed and not), on
loopback, measured the way the field's harnesses measure: the system's time minus the direct
call's, p50 and p99, at each number of concurrent clients, to the first byte of a streamed
answer and to its end, and for non-streamed answers; requests per second at each concurrency
(and the most at which the p99 of a whole streamed answer stays under 100 ms); errors.

- `jeirt`: deployments/local.yaml with `auth: required` (every request carries a key with rate
  and spend limits, checked and counted in SQLite), the instant (hashing) encoder: the gateway's
  own cost, its decision included, and no transformer's.
- `jeirt_haproxy`: the same behind HAProxy (`jeirt serve --ingress haproxy`: Ray's direct
  ingress, HAProxy straight to the Router replica) in place of Serve's Python proxy.
- `jeirt_minilm`, `jeirt_minilm_haproxy`: the same with MiniLM, the real encoder, in the path:
  the price of a learned decision on its own line (with the encoder's own latency and batched
  throughput, measured offline in the same run, as `minilm_encoder`).
- `litellm`: LiteLLM's proxy (`litellm` from PyPI, in a virtual environment of its own as its
  pins clash with this project's: `python -m venv .venv-litellm && .venv-litellm/bin/pip install
  'litellm[proxy]'`; `--litellm` names its `litellm` command, by default that one or the first
  on PATH), one worker, a master key, its default routing, the upstream as an `openai/` model.
  Without it the run says so and leaves its rows out.

JSON: `rows["<clients>"]["<system>"]` with `added_p50_ms`, `added_p99_ms` (first byte, streamed),
`added_total_p50_ms`, `added_total_p99_ms` (whole streamed answer), `added_nonstream_p50_ms`,
`p50_ms`, `p99_ms`, `total_p50_ms`, `total_p99_ms`, `rps`, `errors`; `rps_at_p99_under_100ms`
per system; `targets["<ingress>"]` (issue 44's, checked for jeirt behind each ingress).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import ROOT, encoder_alone, free_port, keyed_gateway, registered_space, service, test_texts
from jeirt_ray.serving.deployment.ingress import INGRESSES

sys.path.insert(0, str(ROOT))
from tests.upstream import Upstreams  # noqa: E402 (the test upstream, launched as a process)

WARMUP = 20
THREADS = 1  # torch threads of the served encoder (encoder_threads), and of the offline one it is compared with


async def measure(url: str, texts: list[str], clients: int, requests: int, headers: dict | None, stream: bool,
                  model: str = "auto") -> dict:
    """`requests` chat completions from `clients` concurrent clients (after WARMUP): per request
    the time to the first body byte and to the end; p50/p99 (ms), requests per second, errors."""
    import httpx
    first, total, errors = [], [], [0]
    span = [float("inf"), 0.0]

    async def one(client, i, keep):
        body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": texts[i % len(texts)]}]}
        start = time.perf_counter()
        try:
            async with client.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as r:
                chunks = r.aiter_raw()
                await anext(chunks)
                got = time.perf_counter()
                async for _ in chunks:
                    pass
                ok = r.status_code == 200
        except (httpx.HTTPError, StopAsyncIteration):
            ok = False
        end = time.perf_counter()
        if keep:
            if not ok:
                errors[0] += 1
                return
            first.append(got - start)
            total.append(end - start)
            span[0], span[1] = min(span[0], start), max(span[1], end)

    async def worker(client, k):
        for j in range(k, WARMUP + requests, clients):
            await one(client, j, keep=j >= WARMUP)

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as client:
        await asyncio.gather(*(worker(client, k) for k in range(clients)))
    f, t = np.asarray(first) * 1000, np.asarray(total) * 1000
    if not len(t):
        return {"errors": errors[0], "n": 0}
    return {"p50_ms": float(np.percentile(f, 50)), "p99_ms": float(np.percentile(f, 99)),
            "total_p50_ms": float(np.percentile(t, 50)), "total_p99_ms": float(np.percentile(t, 99)),
            "rps": len(t) / (span[1] - span[0]), "errors": errors[0], "n": len(t)}


def row(streamed: dict, plain: dict, direct_streamed: dict, direct_plain: dict) -> dict:
    """One system at one concurrency: its figures and what it adds to the direct call's."""
    if not streamed.get("n"):
        return {"errors": streamed["errors"], "n": 0}
    return {**streamed,
            "added_p50_ms": streamed["p50_ms"] - direct_streamed["p50_ms"],
            "added_p99_ms": streamed["p99_ms"] - direct_streamed["p99_ms"],
            "added_total_p50_ms": streamed["total_p50_ms"] - direct_streamed["total_p50_ms"],
            "added_total_p99_ms": streamed["total_p99_ms"] - direct_streamed["total_p99_ms"],
            "nonstream_p50_ms": plain.get("total_p50_ms"), "nonstream_p99_ms": plain.get("total_p99_ms"),
            "added_nonstream_p50_ms": (plain["total_p50_ms"] - direct_plain["total_p50_ms"]) if plain.get("n") else None,
            "nonstream_errors": plain["errors"]}


def ladder(name: str, url: str, texts, clients, requests, headers, direct: dict, rows: dict, model: str = "auto"):
    for c in clients:
        streamed = asyncio.run(measure(url, texts, c, requests, headers, True, model))
        plain = asyncio.run(measure(url, texts, c, requests, headers, False, model))
        rows.setdefault(str(c), {})[name] = row(streamed, plain, *direct[c])
        r = rows[str(c)][name]
        print(f"{name:13s} c={c:3d} p50 {r.get('p50_ms', float('nan')):8.2f} ms (+{r.get('added_p50_ms', float('nan')):7.2f})"
              f"  p99 {r.get('p99_ms', float('nan')):8.2f}  rps {r.get('rps', 0):7.1f}  errors {r['errors']}", flush=True)


def find_litellm(given: str | None) -> str | None:
    if given:
        return given
    local = ROOT / ".venv-litellm" / "bin" / "litellm"
    return str(local) if local.exists() else shutil.which("litellm")


class LiteLLM:
    """LiteLLM's proxy as a subprocess on loopback: one worker, a master key, the upstream as
    the model `auto` (an OpenAI-compatible endpoint)."""

    KEY = "sk-bench-master-key"

    def __init__(self, command: str, upstream: str):
        self.folder = Path(tempfile.mkdtemp(prefix="litellm-"))
        import yaml
        (self.folder / "config.yaml").write_text(yaml.safe_dump({
            "model_list": [{"model_name": "auto", "litellm_params": {
                "model": "openai/mock", "api_base": upstream, "api_key": "sk-upstream"}}],
            "general_settings": {"master_key": self.KEY},
            "litellm_settings": {"telemetry": False, "drop_params": True}}))
        self.port = free_port()
        env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "DISABLE_SCHEMA_UPDATE": "true"}
        env.pop("DATABASE_URL", None)
        self.log = open(self.folder / "litellm.log", "w")
        self.proc = subprocess.Popen([command, "--config", str(self.folder / "config.yaml"), "--host", "127.0.0.1",
                                      "--port", str(self.port), "--num_workers", "1"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        self.version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()
        import httpx
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LiteLLM's proxy exited ({self.proc.returncode}): see {self.folder / 'litellm.log'}")
            try:
                if httpx.get(f"{self.url}/health/liveliness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"LiteLLM's proxy did not start in 180 s: see {self.folder / 'litellm.log'}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def jeirt_rows(data_dir, encoder: str, split_seed: int, upstream: str, clients, requests, direct, rows, name: str,
               ingress: str):
    """jeirt's gateway on `encoder` behind `ingress`: auth required, a key with limits, every LLM on
    the upstream."""
    data, prep, texts = test_texts(data_dir, encoder, split_seed)
    with registered_space(prep) as home:
        headers, edit = keyed_gateway(home, data.models, upstream)
        with service(home, encoder, threads=THREADS, edit=edit, ingress=ingress) as url:
            ladder(name, f"{url}/v1", texts, clients, requests, headers, direct, rows)
    return texts, data.n_models


def system(base: str, ingress: str) -> str:
    return base if ingress == "proxy" else f"{base}_{ingress}"


def targets(rows: dict, minilm: dict | None, ingress: str) -> dict:
    """Issue 44's targets for jeirt behind `ingress`."""
    one = rows.get("1", {})
    jeirt, jeirt_minilm = system("jeirt", ingress), system("jeirt_minilm", ingress)
    out = {}
    if "litellm" in one and jeirt in one:
        j, lite = one[jeirt], one["litellm"]
        out["one_client_added_p50_below_litellm"] = j["added_p50_ms"] < lite["added_p50_ms"]
        out["one_client_added_p50_at_most_3_ms"] = j["added_p50_ms"] <= 3.0
        out["one_client_p99_at_most_twice_p50"] = j["p99_ms"] <= 2 * j["p50_ms"]
        for c in ("8", "32"):
            if c in rows and "litellm" in rows[c]:
                out[f"c{c}_added_p50_at_most_litellm"] = rows[c][jeirt]["added_p50_ms"] <= rows[c]["litellm"]["added_p50_ms"]
                out[f"c{c}_rps_at_least_litellm"] = rows[c][jeirt]["rps"] >= rows[c]["litellm"]["rps"]
    if minilm and jeirt_minilm in one:
        out["minilm_one_client_within_encoder_plus_2_ms"] = \
            one[jeirt_minilm]["added_p50_ms"] <= minilm["single_p50_ms"] + 2.0
        if "32" in rows and jeirt_minilm in rows["32"]:
            out["minilm_c32_rps_at_least_80pct_of_batched_encoder"] = \
                rows["32"][jeirt_minilm]["rps"] >= 0.8 * minilm["batched_qps"]
    return out


def main():
    ap = parser(__doc__)
    ap.add_argument("--litellm", help="LiteLLM's `litellm` command (default: .venv-litellm/bin/litellm, else PATH)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--requests", type=int, default=300, help="measured requests per system, mode and client count")
    ap.add_argument("--ingress", nargs="+", choices=INGRESSES, default=list(INGRESSES),
                    help="jeirt behind each of these front doors (jeirt serve --ingress)")
    ap.add_argument("--no-minilm", action="store_true", help="leave out jeirt with the MiniLM encoder")
    args = ap.parse_args()
    data_dir = dataset_path(args.data, "mmlu_pro")
    ups = Upstreams()
    rows: dict = {}
    notes, minilm, lite_version = [], None, None
    try:
        upstream = ups.start("up0")
        _, _, texts = test_texts(data_dir, "hashing", args.split_seed)
        direct = {}
        for c in args.clients:
            s = asyncio.run(measure(upstream, texts, c, args.requests, None, True))
            p = asyncio.run(measure(upstream, texts, c, args.requests, None, False))
            direct[c] = (s, p)
            rows.setdefault(str(c), {})["direct"] = row(s, p, s, p)
            print(f"direct        c={c:3d} p50 {s['p50_ms']:8.2f} ms  p99 {s['p99_ms']:8.2f}  rps {s['rps']:7.1f}", flush=True)
        command = find_litellm(args.litellm)
        if command is None:
            notes.append("LiteLLM not found (--litellm PATH, or .venv-litellm/bin/litellm): its rows are left out")
            print(notes[-1], flush=True)
        else:
            lite = LiteLLM(command, upstream)
            lite_version = lite.version
            try:
                ladder("litellm", lite.url, texts, args.clients, args.requests,
                       {"authorization": f"Bearer {LiteLLM.KEY}"}, direct, rows)
            finally:
                lite.stop()
        for ingress in args.ingress:
            _, llms = jeirt_rows(data_dir, "hashing", args.split_seed, upstream, args.clients, args.requests, direct,
                                 rows, system("jeirt", ingress), ingress)
        if not args.no_minilm:
            single_ms, batched = encoder_alone(args.encoder, THREADS, texts[:100], texts[:256])
            minilm = {"single_p50_ms": single_ms, "batched_qps": batched, "threads": THREADS}
            for ingress in args.ingress:
                jeirt_rows(data_dir, args.encoder, args.split_seed, upstream, args.clients, args.requests, direct,
                           rows, system("jeirt_minilm", ingress), ingress)
    finally:
        ups.stop()
    systems = dict.fromkeys(s for r in rows.values() for s in r)
    best = {s: max((rows[c][s]["rps"] for c in rows if s in rows[c] and rows[c][s].get("n")
                    and rows[c][s]["total_p99_ms"] < 100), default=None) for s in systems}
    checked = {ingress: targets(rows, minilm, ingress) for ingress in args.ingress}
    write_json(args.out, {"data": str(data_dir), "llms": llms, "ingress": args.ingress, "clients": args.clients, "requests": args.requests,
                          "cpus": os.cpu_count(), "litellm": {"command": command, "version": lite_version},
                          "encoder": args.encoder, "minilm_encoder": minilm, "rows": rows,
                          "rps_at_p99_under_100ms": best, "targets": checked, "notes": notes})
    print(json.dumps(checked, indent=1))


if __name__ == "__main__":
    main()
