"""The feedback loop end to end, through the gateway, on real recorded answers: mmlu_pro's four
LLMs with recorded outputs replayed as upstreams (jeirt_ray/api/replay.py), a space that never saw
one category, and that category's questions sent as chat requests in random order; each answer
graded by the answer key (with the extraction rule the LLM's run was graded by) and sent back as
`POST /v1/feedback` (source `key`); the Router replicas learn from the feedback store
(`user_config.learning`, the loop's defaults, chosen on validation by benchmarks/feedback_loop.py);
at the end, `jeirt learn` (api/learn.py) turns the logged grades into a challenger and promotes it
only when its held-out grades show it better.

    python benchmarks/gateway_loop.py [--data DIR] --out F.json [--categories engineering history]
        [--seeds 0] [--clients 2] [--max-queries N] [--train-questions N] [--encoder all-MiniLM-L6-v2]
        [--learn-at 0.5] [--replicas 1] [--explore 0.0] [--kill-replica-at 0.25] [--feedback-db URL]

The feedback store is SQLite in each run's temporary home by default; `--feedback-db` names a
PostgreSQL server instead (`postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB`, as a cluster's
replicas share it), where each run gets a database of its own, dropped at its end.

With `--kill-replica-at F`, one Router replica is SIGKILLed when that share of the stream has been
sent, requests in flight (`killed`: when, how long Serve took to replace it, and decisions_lost:
answered decisions the decision log does not hold). With `--learn-at 0.5`, `jeirt learn` runs on
the first half's grades instead, and the second half is routed by whatever is `@champion` then:
the promoted challenger (once the replicas serve it), or the champion still learning online.

Every request asks for the highest P(correct) (`most_likely`) among the LLMs with a recorded answer
to its question; the static router is the same space's choice without learning, on the same
requests. `loop` and `static` are the dataset's labels of those choices (the answer key agrees
with them on almost every row: `key_agrees_with_label`), over the second half of the stream, with
the paired 95% interval of their difference. Also counted: failed requests, grades recorded and
applied by the replicas, and whether any query text reached the decision log, the feedback
store, the registry or Ray's logs (`log_queries: embedding`, the default), and the admin token.

JSON: `runs[]` (category, seed, queries, failed, failures, feedback_status, graded, narrowed (the
share of queries on which fewer than the four LLMs had a recorded answer to choose from), applied,
static, loop, category_best, loop_minus_static, loop_minus_static_ci95, loop_llm_share,
static_llm_share, key_agrees_with_label; served_minus_static_p: per LLM, the served P(correct)
after learning minus the space's own, mean over the stream's first PROBE questions;
graded_minus_static_p: per LLM, its grades minus the space's P on the questions it answered, the
way learning should move it; applied: the grades the serving version's learner applied (after a
promotion, those after the challenger's `feedback_seq`); learn: what `jeirt learn` made of the
logged grades (registered, promoted, alias, grades_learned, grades_held_out, log_loss_gain and its
95% interval, and served_after_s: seconds until the replicas served a promoted version; or its error);
query_text_found, token_found (the admin token, or the feedback database's password), seconds), `mean`,
`settings`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from _common import dataset_path, parser, postgres_database, url_password, write_json
from _serving import service
from feedback_loop import FOUR, only
from jeirt_ray.api.replay import ReplayServer
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.data.answer_key import AnswerKey
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments import online_sim as sim
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.experiments.selection import fixed_config

PROBE = 50  # questions of the stream whose served P(correct) is read back after learning
# the extraction rule each recorded LLM's run was graded by (tests/test_onboard_endpoint.py checks it)
KIND = {"Phi-3-mini-4k-instruct": "letter_strict", "DeepSeek-V2": "letter_strict",
        "gemini-1.5-flash-002": "letter", "Meta-Llama-3_1-70B-Instruct": "letter"}


def sampled(data, category: str, train_questions: int | None, seed: int):
    """The dataset with the category's questions and at most `train_questions` others."""
    others = np.flatnonzero(data.benchmarks != category)
    if train_questions is None or train_questions >= len(others):
        return data
    keep = np.sort(np.concatenate([np.flatnonzero(data.benchmarks == category),
                                   np.random.default_rng(seed).choice(others, train_questions, replace=False)]))
    new = np.full(data.n_questions, -1)
    new[keep] = np.arange(len(keep))
    rows = new[data.q_idx] >= 0
    return dataclasses.replace(data, question_ids=data.question_ids[keep], benchmarks=data.benchmarks[keep],
                               texts=data.texts[keep], q_idx=new[data.q_idx[rows]], m_idx=data.m_idx[rows],
                               labels=data.labels[rows])


def ask(client: httpx.Client, url: str, text: str, candidates: list[str]) -> dict:
    """One chat request: {status, id, llm, answer}."""
    try:
        r = client.post(f"{url}/v1/chat/completions", headers={"x-jeirt-policy": "most_likely"},
                        json={"model": "auto", "messages": [{"role": "user", "content": text}],
                              "candidates": candidates})
    except httpx.HTTPError as e:
        return {"status": type(e).__name__}
    if r.status_code != 200:
        return {"status": f"{r.status_code} {r.text[:200]}"}
    body = r.json()
    return {"status": 200, "id": body["id"], "llm": body["model"], "answer": body["choices"][0]["message"]["content"]}


def feedback(client: httpx.Client, url: str, decision_id: str, score: float) -> int | str:
    try:
        r = client.post(f"{url}/v1/feedback", json={"id": decision_id, "score": score, "source": "key"})
    except httpx.HTTPError as e:
        return type(e).__name__
    return r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"


def found(roots: list[Path], needles: list[str]) -> int:
    """How many of `needles` appear in any file under `roots`."""
    hits = set()
    for f in (p for root in roots for p in root.rglob("*") if p.is_file()):
        blob = f.read_bytes()
        hits.update(i for i, n in enumerate(needles) if n.encode() in blob)
    return len(hits)


def run_learn(feedback_url: str) -> dict:
    """`jeirt learn` on the logged traffic: a challenger, promoted only when its held-out grades show it better."""
    from jeirt_ray.api.learn import learn
    try:
        learned = learn("models:/bench@champion", since_days=1.0, feedback_url=feedback_url)
    except ValueError as e:  # too few grades for a held-out comparison
        return {"error": str(e)}
    return {k: learned[k] for k in ("registered", "promoted", "alias", "grades_learned", "grades_held_out",
                                    "log_loss_gain", "log_loss_gain_ci95")}


def served_after(url: str, registered: str, timeout_s: float = 60.0) -> float:
    """Seconds until a route is answered by `registered` (models:/NAME/VERSION): the replicas'
    alias watch picks up the promotion (`refresh_s`)."""
    start = time.monotonic()
    label, in_a_row = registered.removeprefix("models:/"), 0
    while time.monotonic() - start < timeout_s:
        r = httpx.post(f"{url}/v1/route", json={"queries": ["which LLM?"]}, timeout=30)
        in_a_row = in_a_row + 1 if r.status_code == 200 and r.json()["space"] == label else 0
        if in_a_row == 8:  # every replica, as far as 8 answers in a row can tell
            return time.monotonic() - start
        time.sleep(0.25)
    raise RuntimeError(f"{registered} was promoted but not served within {timeout_s:.0f} s")


def kill_a_router(timeout_s: float = 120.0) -> dict:
    """SIGKILL one Router replica (as tests/test_serve_app.py does) and wait for Serve to replace it:
    {at: when it was killed (Unix time), replaced_after_s}."""
    import ray
    from ray import serve
    from ray.util.state import list_actors

    def alive():
        return {a.name for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")])
                if a.class_name == "ServeReplica:jeirt:Router"}
    before, start, at = alive(), time.monotonic(), time.time()
    ray.kill(ray.get_actor(sorted(before)[0], namespace="serve"), no_restart=True)
    while time.monotonic() - start < timeout_s:
        states = serve.status().applications["jeirt"].deployments["Router"].replica_states
        if len(alive() - before) == 1 and states.get("RUNNING", 0) == len(before):
            return {"at": at, "replaced_after_s": time.monotonic() - start}
        time.sleep(0.5)
    return {"at": at, "replaced_after_s": None}


def run_one(data, encoder_name: str, folder: Path, category: str, seed: int, clients: int, max_queries: int | None,
            train_questions: int | None, learn_at: float | None = None, replicas: int = 1, explore: float = 0.0,
            kill_at: float | None = None, feedback_db: str | None = None) -> dict:
    data = sampled(data, category, train_questions, seed)
    prep = prepare(data, make_encoder(encoder_name), split=sim.held_out_split(data, [category], seed, (0.8, 0.1, 0.1)),
                   cache_root=paths.cache_dir(), progress=False)
    space = train_space(prep, fixed_config("jeirt").model_copy(update={"seed": seed}), members=1, progress=False)
    rows = np.flatnonzero(data.benchmarks == category)
    rows = rows[np.random.default_rng(seed).permutation(len(rows))][:max_queries]
    labels, x = data.label_matrix(rows), prep.X[rows]
    names = [str(m) for m in data.models]
    keys = {n: AnswerKey.read(folder / "answers.csv.gz", default_kind=KIND[n]) for n in names}
    with tempfile.TemporaryDirectory() as home, ReplayServer(folder, models=names) as replay, \
            postgres_database(feedback_db, f"jeirt_loop_{category}_{seed}") as feedback_url:
        home = Path(home)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home}/mlflow.db"
        token = os.environ["JEIRT_API_TOKEN"] = f"bench-{secrets.token_hex(12)}"  # the admin's: /health's details
        from jeirt_ray.tracking.registry import SpaceRegistry
        reg = SpaceRegistry()
        reg.promote("bench", reg.register(space, "bench"), "champion")
        feedback_url = feedback_url or f"sqlite:///{home}/feedback.db"
        os.environ["JEIRT_FEEDBACK_URL"] = feedback_url  # the replicas' (inherited), as a cluster's Secret gives it

        def edit(raw):
            router = next(d for d in raw["applications"][0]["deployments"] if d["name"] == "Router")
            router["user_config"].update(
                upstreams={n: replay.url for n in names},
                decisions={"path": str(home / "decisions"), "flush_s": 0.5},
                learning={"enabled": True, "poll_s": 1.0, "explore": explore})
            router["num_replicas"] = replicas
        start = time.perf_counter()
        with service(home, encoder_name, 1, edit) as url:
            results: list[dict] = [{}] * len(rows)
            kill_index = None if kill_at is None else int(kill_at * len(rows))
            killed: dict = {}
            killer = threading.Thread(target=lambda: killed.update(kill_a_router()))

            def one(i: int, client: httpx.Client) -> None:
                if i == kill_index:  # from beside the stream, with requests in flight
                    killer.start()
                has = [n for n, y in zip(names, labels[i]) if not np.isnan(y)]
                got = ask(client, url, str(data.texts[rows[i]]), has)
                if got["status"] == 200:
                    grade = keys[got["llm"]].grade(str(data.question_ids[rows[i]]), got["answer"]).label
                    got["grade"], got["feedback"] = grade, feedback(client, url, got["id"], grade)
                results[i] = got

            def stream(indices) -> dict:
                """Send `indices` (`clients` requests in flight at a time, in stream order), then wait until
                every grade so far is applied; /health's details."""
                with httpx.Client(timeout=120) as client, concurrent.futures.ThreadPoolExecutor(clients) as pool:
                    list(pool.map(lambda i: one(i, client), indices))
                graded = sum(r.get("feedback") == 200 for r in results)
                deadline, in_a_row = time.monotonic() + 60, 0  # the replicas read the store every poll_s
                while True:  # feedback rows are numbered from 1 in arrival order (`seq`)
                    health = httpx.get(f"{url}/health", headers={"authorization": f"Bearer {token}"}, timeout=30).json()
                    in_a_row = in_a_row + 1 if health["learning"]["seq"] >= graded else 0
                    if in_a_row == 2 * replicas or time.monotonic() > deadline:  # every replica, as far as
                        return health  # answers in a row can tell
                    time.sleep(0.5)

            cut = len(rows) if learn_at is None else int(learn_at * len(rows))
            health, learned = stream(range(cut)), None
            if cut < len(rows):  # `jeirt learn` now, and the rest of the stream routed by what is @champion then
                learned = run_learn(feedback_url)
                if learned.get("promoted"):
                    learned["served_after_s"] = served_after(url, learned["registered"])
                health = stream(range(cut, len(rows)))
            if killer.is_alive():
                killer.join()  # the replacement waited for while the service is still up
            graded = sum(r.get("feedback") == 200 for r in results)
            seconds = time.perf_counter() - start
            # what the replicas learned: the served P(correct) on the stream's first questions against the
            # space's own, per LLM
            probe = np.arange(min(PROBE, len(rows)))
            served = httpx.post(f"{url}/v1/route", json={"queries": [str(data.texts[rows[i]]) for i in probe],
                                                         "top_k": None, "policy": "most_likely"}, timeout=120)
            served.raise_for_status()
            p_served = np.array([[{s["model"]: s["p_correct"] for s in d["scores"]}[n] for n in names]
                                 for d in served.json()["results"]])
            learned = learned or run_learn(feedback_url)  # at the end, unless done mid-stream
            import ray
            ray_logs = Path(ray._private.worker._global_node.get_logs_dir_path())  # as tests/test_serve_keys.py
            # any query's text (its first 60 characters), or the admin token, written anywhere
            leaked = found([home, ray_logs], [str(data.texts[r])[:60] for r in rows if len(str(data.texts[r])) >= 60])
            secrets_kept = [token] + ([pw] if feedback_db and (pw := url_password(feedback_db)) else [])
            token_found = found([home, ray_logs], secrets_kept)

        if kill_at is not None:  # what the decision log lost: answered decisions it does not hold
            import pyarrow.parquet as pq
            logged = set(pq.read_table(home / "decisions", columns=["id"]).column("id").to_pylist())
            killed["decisions_lost"] = sum(r["status"] == 200 and r["id"] not in logged for r in results)

    ok = np.array([r["status"] == 200 for r in results])
    col = {n: k for k, n in enumerate(names)}
    idx = np.arange(len(rows))
    chosen = np.array([col.get(r.get("llm"), -1) for r in results])
    p_static = space.predict_proba(x)[:, [space.model_names.index(n) for n in names]]
    static = np.where(~np.isnan(labels), p_static, -1.0).argmax(1)
    half = (idx >= len(rows) // 2) & ok
    loop_y, static_y = labels[idx[half], chosen[half]], labels[idx[half], static[half]]
    best = int(np.nanargmax(np.nanmean(labels[half], 0)))
    graded_minus_static = {n: float(np.mean([r["grade"] - p_static[i, k] for i, r in enumerate(results)
                                             if r.get("llm") == n and "grade" in r]))
                           for n, k in col.items() if any(r.get("llm") == n and "grade" in r for r in results)}
    agree = [r["grade"] == labels[i, col[r["llm"]]] for i, r in enumerate(results) if "grade" in r]
    return {"category": category, "seed": seed, "queries": len(rows), "failed": int((~ok).sum()),
            "failures": sorted({str(r["status"]) for r in results if r["status"] != 200}),
            "graded": int(graded),
            "feedback_status": {str(k): int(v) for k, v in zip(*np.unique([str(r["feedback"]) for r in results if "feedback" in r],
                                                                          return_counts=True))},
            "applied": int(health["learning"]["applied"]),
            "narrowed": float(np.mean(np.isnan(labels).any(1))),
            "second_half": int(half.sum()), "static": float(static_y.mean()), "loop": float(loop_y.mean()),
            "category_best": float(np.nanmean(labels[half, best])), "category_best_llm": names[best],
            "loop_minus_static": float(loop_y.mean() - static_y.mean()),
            "loop_minus_static_ci95": sim.paired_ci(loop_y, static_y, seed=seed),
            "loop_llm_share": {n: float(np.mean(chosen[half] == k)) for n, k in col.items()},
            "static_llm_share": {n: float(np.mean(static[half] == k)) for n, k in col.items()},
            "key_agrees_with_label": float(np.mean(agree)) if agree else None,
            "served_minus_static_p": {n: float((p_served[:, k] - p_static[probe, k]).mean()) for n, k in col.items()},
            "graded_minus_static_p": graded_minus_static,
            "learn": learned, **({"killed": killed} if kill_at is not None else {}),
            "query_text_found": leaked, "token_found": token_found, "seconds": seconds}


def main():
    ap = parser(__doc__)
    ap.add_argument("--categories", nargs="+", default=["engineering", "history"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--clients", type=int, default=2, help="requests in flight at a time")
    ap.add_argument("--max-queries", type=int, help="the first N of each category's stream (default: all)")
    ap.add_argument("--train-questions", type=int, help="train on at most N questions of the other categories "
                                                         "(default: all)")
    ap.add_argument("--learn-at", type=float, help="run `jeirt learn` at this fraction of each stream (0.5: on the "
                                                   "first half's grades) and route the rest with what is @champion then "
                                                   "(default: at the end)")
    ap.add_argument("--replicas", type=int, default=1, help="Router replicas, each learning from the feedback store")
    ap.add_argument("--explore", type=float, default=0.0, help="share of queries the replicas decide by Thompson "
                                                               "sampling from the learned posterior")
    ap.add_argument("--kill-replica-at", type=float, help="SIGKILL one Router replica when this fraction of each "
                                                          "stream has been sent (needs --replicas 2 or more)")
    ap.add_argument("--feedback-db", help="a PostgreSQL server's SQLAlchemy URL for the feedback store (a database "
                                          "per run); default: SQLite in the run's home")
    args = ap.parse_args()
    if args.feedback_db is not None and not args.feedback_db.startswith("postgresql"):
        raise SystemExit("--feedback-db takes a PostgreSQL URL (postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB)")
    if args.kill_replica_at is not None and (args.replicas < 2 or not 0 <= args.kill_replica_at < 1):
        raise SystemExit("--kill-replica-at: a fraction of the stream (0 to 1) with --replicas 2 or more, so that "
                         "a replica is left to answer")
    if args.learn_at is not None and not 0 < args.learn_at < 1:
        raise SystemExit(f"--learn-at {args.learn_at}: a fraction of the stream, above 0 and below 1 (0.5: its first half)")
    folder = dataset_path(args.data, "mmlu_pro")
    if not (folder / "outputs").exists() or not (folder / "answers.csv.gz").exists():
        raise SystemExit(f"{folder}: needs recorded outputs (outputs/) and an answer key (answers.csv.gz) to replay")
    data = only(load_data(folder), FOUR)
    names = {str(b).split("/")[-1]: str(b) for b in np.unique(data.benchmarks)}
    unknown = [c for c in args.categories if c not in names and c not in names.values()]
    if unknown:
        raise SystemExit(f"categories {unknown} are not in {folder}; it has {sorted(names)}")
    runs = []
    for seed in args.seeds:
        for category in (names.get(c, c) for c in args.categories):
            r = run_one(data, args.encoder, folder, category, seed, args.clients, args.max_queries,
                        args.train_questions, args.learn_at, args.replicas, args.explore, args.kill_replica_at,
                        args.feedback_db)
            runs.append(r)
            print(f"{category:22s} seed {seed}: {r['queries']} queries, {r['failed']} failed, {r['graded']} graded, "
                  f"{r['applied']} applied; static {r['static']:.4f} loop {r['loop']:.4f} best {r['category_best']:.4f} "
                  f"diff {r['loop_minus_static']:+.4f} {np.round(r['loop_minus_static_ci95'], 4).tolist()}", flush=True)
    mean = {k: float(np.mean([r[k] for r in runs])) for k in ("static", "loop", "category_best", "loop_minus_static")}
    write_json(args.out, {"data": str(folder), "encoder": args.encoder, "clients": args.clients,
                          "settings": {"learning": "user_config.learning defaults", "policy": "most_likely",
                                       "learn_at": args.learn_at, "replicas": args.replicas, "explore": args.explore,
                                       "kill_replica_at": args.kill_replica_at,
                                       "feedback_store": "postgresql" if args.feedback_db else "sqlite",
                                       "max_queries": args.max_queries, "train_questions": args.train_questions},
                          "runs": runs, "mean": mean, "targets": {"loop_minus_static_second_half": 0.02, "failed": 0}})


if __name__ == "__main__":
    main()
