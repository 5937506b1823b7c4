"""The production path: an MLflow tracking server on PostgreSQL, artifacts proxied, as
k8s/mlflow.yaml runs it, behind training, the registry and the service; and the service through
the tracking server's outage. One Ray cluster for the module."""

import concurrent.futures
import os
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

from jeirt_ray.cli import app as cli

from .conftest import Load, local_ray, local_serve_config, wait_for

NAME = "prod-path"
TOKEN = "prod-path-token"
ADMIN = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def env(tracking_server, tmp_path_factory):
    """MLFLOW_TRACKING_URI at the server, JEIRT_HOME and the admin token, for this process and the
    Ray cluster the module starts; bounded MLflow retries, as the service sets them."""
    keys = ("MLFLOW_TRACKING_URI", "JEIRT_HOME", "JEIRT_API_TOKEN", "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
            "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")
    saved = {k: os.environ.get(k) for k in keys}
    home = tmp_path_factory.mktemp("prod-path")
    os.environ.update(MLFLOW_TRACKING_URI=tracking_server.url, JEIRT_HOME=str(home), JEIRT_API_TOKEN=TOKEN,
                      MLFLOW_HTTP_REQUEST_MAX_RETRIES="1", MLFLOW_HTTP_REQUEST_TIMEOUT="10",
                      MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="1")
    try:
        yield {"server": tracking_server, "home": home}
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def trained(env):
    """`jeirt train --register --promote` over HTTP (the SYNTHETIC data, hashing encoder)."""
    out = CliRunner().invoke(cli, ["train", "--encoder", "hashing", "--fixed", "--members", "1",
                                   "--register", NAME, "--promote", "champion"])
    assert out.exit_code == 0, out.output
    return env


def _versions(name=NAME) -> list[int]:
    from jeirt_ray.tracking.registry import SpaceRegistry
    return sorted(int(v["version"]) for v in SpaceRegistry().versions(name))


def test_train_register_list_load_and_two_registrations_at_once(trained):
    import jeirt_ray as jr
    assert 1 in _versions()
    listed = CliRunner().invoke(cli, ["registry", "list", NAME])
    assert listed.exit_code == 0 and "champion" in listed.output and "127.0.0.1" in listed.output
    space = jr.Space.load(f"models:/{NAME}@champion")
    assert space.route(["What is 2 + 2?"])[0]["chosen"] in space.model_names
    registry = jr.Registry()
    before = _versions()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two registrations racing each other
        made = list(pool.map(lambda _: registry.register(space, NAME), range(2)))
    assert len(set(made)) == 2 and _versions() == sorted(before + made)


@pytest.fixture(scope="module")
def service(trained):
    """deployments/local.yaml serving models:/prod-path@champion from the tracking server, two
    Router replicas, refresh 1 s."""
    from jeirt_ray.serving.deployment.deploy import deploy, load_config

    def edit(app):
        router = next(d for d in app["deployments"] if d["name"] == "Router")
        router["num_replicas"] = 2
        router["user_config"]["refresh_s"] = 1
    path = local_serve_config(trained["home"] / "serve.yaml", edit, cpus=0.25, model=NAME, encoder="hashing")
    with local_ray():
        yield deploy(load_config(path))


def _served_version(url) -> str:
    return httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["registry_version"]


def test_serve_loads_over_http_and_onboarding_registers_a_version(service, trained):
    from jeirt_ray.tracking.registry import SpaceRegistry
    champion = str(SpaceRegistry().resolve(f"models:/{NAME}@champion").version)
    assert wait_for(lambda: _served_version(service) == champion, 30)  # the alias, not the newest version
    questions = SpaceRegistry().load(f"models:/{NAME}/1").question_ids[:200]
    responses = [{"question_id": str(q), "label": float(i % 3 > 0)} for i, q in enumerate(questions)]
    before = _versions()
    r = httpx.post(f"{service}/v1/onboard", headers=ADMIN, timeout=120,
                   json={"model": "newcomer", "responses": responses, "promote": True})
    assert r.status_code == 200, r.text
    assert _versions() == before + [r.json()["version"]]
    assert wait_for(lambda: all(_served_version(service) == str(r.json()["version"]) for _ in range(4)), 60)


def test_the_service_rides_out_a_tracking_server_outage(service, trained):
    """The tracking server killed under 4 clients' load for 20 s: routing goes on from the version
    held, /health says degraded, onboarding answers 503 with Retry-After and registers nothing; a
    promotion made meanwhile (straight in PostgreSQL, as another tracking server would) is served
    once the server is back."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    server = trained["server"]
    held = _served_version(service)
    registry = SpaceRegistry()
    target = registry.register(registry.load(f"models:/{NAME}/{held}"), NAME)  # promoted during the outage
    versions = _versions()
    with Load(service) as load:
        time.sleep(2)
        server.stop()
        down, ok_before = time.time(), load.ok
        assert wait_for(lambda: httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["status"] == "degraded",
                     30)
        asked = time.time()
        r = httpx.post(f"{service}/v1/onboard", headers=ADMIN, timeout=120,
                       json={"model": "during-outage", "responses": [{"question_id": "q0", "label": 1.0}]})
        refused_s = time.time() - asked
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0, r.text
        SpaceRegistry(server.backend).promote(NAME, target, "champion")
        time.sleep(max(0.0, 20 - (time.time() - down)))
        answered_while_down = load.ok - ok_before
        server.start()
        back = time.time()
        assert wait_for(lambda: all(_served_version(service) == str(target) for _ in range(4)), 90)
        picked_up_s = time.time() - back
        assert wait_for(lambda: httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["status"] == "ok", 30)
    print(f"\n[outage] tracking server down {back - down:.0f} s under 4 clients: {load.ok + len(load.failed)} "
          f"requests, {len(load.failed)} failed, {answered_while_down} answered while it was down; the promotion made "
          f"meanwhile served {picked_up_s:.1f} s after it came back; onboarding refused (503) in {refused_s:.1f} s; "
          f"versions {len(_versions())} vs {len(versions)} "
          "expected")
    assert not load.failed and answered_while_down > 20
    assert _versions() == versions  # the refused onboarding left nothing behind


def test_a_replica_starting_while_the_server_is_down_waits_for_it(trained, caplog):
    """The live space of a starting replica (a plain class: what Router.reconfigure runs) while
    the tracking server is down: it retries with growing pauses, one line each, and serves once
    the server is back, instead of failing the replica."""
    import logging

    from jeirt_ray.serving.live import LiveSpace
    from jeirt_ray.serving.settings import RouterConfig
    server = trained["server"]
    live = LiveSpace(NAME, "hashing-384", server.url)
    server.stop()
    started = threading.Thread(target=live.configure, args=(RouterConfig(),))
    with caplog.at_level(logging.WARNING, logger="jeirt.serve"):
        started.start()
        time.sleep(8)
        assert started.is_alive() and live.core is None
        server.start()
        started.join(120)
    assert not started.is_alive() and live.core is not None
    waits = [r.getMessage() for r in caplog.records if "this replica retries in" in r.getMessage()]
    assert waits and all("the registry cannot be reached" in w for w in waits)
    live.close()


def test_postgresql_restarted_under_the_tracking_server(service, trained, postgres):
    """PostgreSQL stopped for 10 s and started again under the tracking server, under load: the
    service answers throughout, and once the database is back the tracking server takes new
    versions and the service picks up a promotion."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    registry = SpaceRegistry()
    held = _served_version(service)
    with Load(service) as load:
        time.sleep(2)
        postgres.stop()
        time.sleep(10)
        postgres.start()
        back = time.time()
        version = None
        while version is None and time.time() - back < 60:  # the server's pool reconnects
            try:
                version = registry.register(registry.load(f"models:/{NAME}/{held}"), NAME)
            except Exception:
                time.sleep(1)
        assert version is not None, "the tracking server took no version after PostgreSQL came back"
        registry.promote(NAME, version, "champion")
        assert wait_for(lambda: all(_served_version(service) == str(version) for _ in range(4)), 90)
        picked_up_s = time.time() - back
    print(f"\n[postgres] restarted under the tracking server (10 s down) under 4 clients: "
          f"{load.ok + len(load.failed)} requests, {len(load.failed)} failed; a version registered and promoted "
          f"after it came back served {picked_up_s:.1f} s later")
    assert not load.failed


def test_an_incomplete_artifact_is_refused_and_the_old_version_kept(service, trained):
    """A version whose stored space was cut off midway (its weights file truncated in the
    server's artifact store, as an interrupted upload or download leaves it) is promoted: the
    replicas refuse it, keep serving the version they hold, and say so to an admin; onboarding
    builds on the newest version that loads."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    registry = SpaceRegistry()
    held = _served_version(service)
    cut = registry.register(registry.load(f"models:/{NAME}/{held}"), NAME)
    source = registry.client.get_model_version(NAME, str(cut)).source  # .../artifacts/space
    run_id = registry.client.get_model_version(NAME, str(cut)).run_id
    weights = sorted(trained["server"].artifacts.rglob(f"{run_id}/artifacts/space/*.safetensors"))
    assert weights, source
    for w in weights:
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    registry.promote(NAME, cut, "champion")
    try:
        def refused():
            h = httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()
            return h["status"] == "degraded" and h["registry"]["error"]
        assert wait_for(lambda: all(refused() for _ in range(4)), 60)
        assert all(_served_version(service) == held for _ in range(4))
        assert httpx.post(f"{service}/v1/route", json={"query": "q"}, timeout=30).status_code == 200
        questions = registry.load(f"models:/{NAME}/{held}").question_ids[:50]
        onboarded = httpx.post(f"{service}/v1/onboard", headers=ADMIN, timeout=120, json={  # built on an older one
            "model": "after-the-cut", "responses": [{"question_id": str(q), "label": float(i % 2)}
                                                    for i, q in enumerate(questions)]})
        assert onboarded.status_code == 200 and onboarded.json()["based_on_version"] < cut, onboarded.text
    finally:
        registry.promote(NAME, int(held), "champion")
        assert wait_for(lambda: all(httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["status"] == "ok"
                                    for _ in range(4)), 60)
