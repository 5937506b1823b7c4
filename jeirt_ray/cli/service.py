"""`jeirt serve | route | replay | k8s-check | mlflow-ui`: the service, its clients and its
deployment checks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..core.secrets import redact
from ..routing.decisions import DEFAULT_TOP_K, POLICIES as POLICY_NAMES
from ..serving.deployment.ingress import DEFAULT_INGRESS
from .output import console, expected_failures


def serve_cmd(config: Path = typer.Argument(..., help="a Serve config, e.g. deployments/local.yaml"),
              model: Optional[str] = typer.Option(None, help="override the registered model name (args.model)"),
              port: Optional[int] = typer.Option(None, help="override the HTTP port"),
              auth: Optional[str] = typer.Option(None, "--auth", help="required: every route needs an API key (`jeirt "
                                                 "keys create`); open: route, chat, feedback and explore need none (loopback "
                                                 "only). Default: the config's args.auth"),
              ingress: str = typer.Option(DEFAULT_INGRESS, "--ingress", help="the front door of the local Ray it starts: "
                                          "haproxy (HAProxy straight to the Router replicas: one hop less per "
                                          "request), proxy (Serve's Python proxy), or auto (HAProxy where it can "
                                          "run, else the proxy, saying why); see docs/guide/serving.md")):
    """Start the routing and onboarding service described by a Serve config; Ctrl-C stops it."""
    from ..serving.deployment.deploy import serve_forever
    with expected_failures(prefix="cannot serve: "):
        serve_forever(config, model, port, announce=console.print, auth=auth, ingress=ingress)


def route(query: str = typer.Argument(..., help="the question to route"),
          url: str = typer.Option("http://127.0.0.1:8000", help="the service's base URL"),
          key: Optional[str] = typer.Option(None, "--key", envvar="JEIRT_API_KEY", show_default=False,
                                            help="an API key with the route scope (default: JEIRT_API_KEY)"),
          top_k: int = typer.Option(DEFAULT_TOP_K, min=1, help="how many LLMs to show"),
          policy: Optional[str] = typer.Option(None, help=f"{' | '.join(POLICY_NAMES)} (default: the service's, "
                                                          "tuned unless its config says otherwise)"),
          candidates: Optional[list[str]] = typer.Option(None, "--candidate", help="allow only this LLM; repeat "
                                                         "for more"),
          min_p: Optional[float] = typer.Option(None, min=0, max=1, help="allow only LLMs whose p reaches this"),
          max_cost: Optional[float] = typer.Option(None, min=0, help="allow only LLMs costing at most this many "
                                                   "USD per call"),
          cost_weight: Optional[float] = typer.Option(None, min=0, help="cost_weighted: p - cost_weight x USD"),
          margin: Optional[float] = typer.Option(None, min=0, max=1, help="cheapest_within_margin: the margin "
                                                 "of p"),
          target_p: Optional[float] = typer.Option(None, min=0, max=1, help="quality_target: the cheapest LLM "
                                                   "whose p reaches this"),
          target_share: Optional[float] = typer.Option(None, min=0, max=1, help="quality_target: ... this share "
                                                       "of the best p"),
          budget_per_1k: Optional[float] = typer.Option(None, min=0, help="budget: USD per 1,000 queries to spend "
                                                        "on average")):
    """Ask a running service which LLM should answer QUERY (POST /v1/route, every setting of it)."""
    import httpx
    if policy is not None and policy not in POLICY_NAMES:
        console.print(f"[red]unknown --policy {policy!r}: one of {', '.join(POLICY_NAMES)}[/red]")
        raise typer.Exit(2)
    settings = {"policy": policy, "candidates": candidates or None, "min_p": min_p, "max_cost": max_cost,
                "cost_weight": cost_weight, "margin": margin, "target_p": target_p, "target_share": target_share,
                "budget_per_1k": budget_per_1k}
    body = {"query": query, "top_k": top_k, **{k: v for k, v in settings.items() if v is not None}}
    try:
        r = httpx.post(f"{url.rstrip('/')}/v1/route", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {key}"} if key else None)
    except httpx.HTTPError as e:
        console.print(f"[red]cannot reach {url}: {e}[/red] (start it with: jeirt serve deployments/local.yaml)")
        raise typer.Exit(1)
    if r.status_code != 200:
        hint = " (pass --key, or set JEIRT_API_KEY, to a key with the route scope)" if r.status_code in (401, 403) else ""
        console.print(f"[red]{r.status_code}: {r.text}[/red]{hint}")
        raise typer.Exit(1 if r.status_code in (401, 403) or r.status_code >= 500 else 2)
    d = r.json()["results"][0]
    cost = "" if d.get("expected_cost") is None else f"; expected cost {d['expected_cost']:.6f} USD"
    console.print(f"[bold]{d['chosen']}[/bold] (policy {d['policy']}; p_correct {d['p_correct']:.3f}{cost}; "
                  f"difficulty {d['difficulty']:.2f}; nearest benchmark {d['nearest_benchmark']}; "
                  f"space {r.json()['space']})")
    table = Table()
    for col in ("LLM", "p_correct", "cost (USD)"):
        table.add_column(col)
    for s in d["scores"]:
        table.add_row(s["model"], f"{s['p_correct']:.3f}", "-" if s["cost"] is None else f"{s['cost']:g}")
    console.print(table)


def replay(data: Path = typer.Option(..., "--data", help="a dataset folder with questions.* and "
                                      "outputs/<model>.jsonl.gz (e.g. ../shared/data/mmlu_pro)"),
           model: Optional[list[str]] = typer.Option(None, "--model", help="replay only this LLM; repeat for more "
                                                     "(default: every recorded one)"),
           port: int = typer.Option(8001, min=0, max=65535, help="the loopback port (0: any free one)")):
    """Serve LLMs' recorded answers as an OpenAI-compatible endpoint on 127.0.0.1, to try `jeirt
    onboard` on real answers without running the LLM; Ctrl-C stops it."""
    import signal
    import threading

    from ..api.replay import ReplayServer
    with expected_failures(prefix="cannot replay: "):
        server = ReplayServer(data, models=model or None, port=port).start()
    console.print(f"replaying {', '.join(server.outputs)} at {server.url} (POST /chat/completions); try: jeirt "
                  f"onboard --endpoint {server.url} --model {next(iter(server.outputs))} --answers "
                  f"{data / 'answers.csv.gz'} ...\nCtrl-C stops it.", highlight=False, soft_wrap=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()


def k8s_check(crds: Path = typer.Option(Path("../shared/kuberay-crds"), help="folder with the KubeRay CRDs "
                                                                            "(ray.io_*.yaml, KubeRay v1.7.0)"),
              root: Path = typer.Option(Path("."), help="the repository root")):
    """Validate k8s/ and deployments/ offline: Kubernetes and KubeRay schemas, Serve configs, Ray versions."""
    from ..serving.deployment.manifests import check_all
    with expected_failures():
        report = check_all(root, crds)
    for place, errors in report.items():
        console.print(f"{'[red]FAIL[/red]' if errors else '[green]ok[/green]  '} {place}")
        for e in errors:
            console.print(f"       {e}")
    raise typer.Exit(1 if any(report.values()) else 0)


def mlflow_ui(port: int = typer.Option(5000)):
    """Open the MLflow UI on the project's tracking database (127.0.0.1 only)."""
    import subprocess
    import sys

    from ..tracking.registry import default_tracking_uri
    console.print(f"MLflow UI for {redact(default_tracking_uri())} at http://127.0.0.1:{port}")
    raise typer.Exit(subprocess.call([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                                      default_tracking_uri(), "--host", "127.0.0.1", "--port", str(port)]))
