"""API keys without Serve: the key store on SQLite and on a real PostgreSQL (scopes, hashing,
limits under concurrent clients, pruning), the access checks the service's middleware makes,
`jeirt keys`, and credentials kept out of messages."""

import asyncio
import concurrent.futures
import http.server
import logging
import time

import pytest
from typer.testing import CliRunner

from jeirt_ray.cli import app as cli
from jeirt_ray.core.secrets import RedactingFilter, redact
from jeirt_ray.serving.access.guard import Access, Denied
from jeirt_ray.serving.access.keys import ADMIN_TOKEN_KEY, KeyStore



@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        return KeyStore(f"sqlite:///{tmp_path / 'keys.db'}")
    url = request.getfixturevalue("postgres_url")
    s = KeyStore(url)
    with s._begin() as c:  # a clean slate: the server lives for the whole session
        c.exec_driver_sql("DELETE FROM jeirt_key_usage")
        c.exec_driver_sql("DELETE FROM jeirt_api_keys")
    return s


@pytest.mark.parametrize("db, message", [
    ("keys.db", "is not a database URL: give sqlite:///"),  # a path for a URL
    ("postgresql://me:SECRET@127.0.0.1:1/x", "cannot be used (OperationalError"),  # nothing listens
    ("mysql://me:SECRET@127.0.0.1/x", "cannot be opened (ModuleNotFoundError"),  # no driver installed
])
def test_a_key_store_that_cannot_be_opened_is_one_line_without_its_password(tmp_path, monkeypatch, db, message):
    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(cli, ["keys", "list", "--db", db])
    assert run.exit_code == 1 and message in run.output and "Traceback" not in run.output, run.output
    assert "SECRET" not in run.output and len(run.output.strip().splitlines()) == 1
    assert not (tmp_path / "keys.db").exists()  # nothing made where a path was taken for a URL


def test_keys_are_created_listed_revoked_and_stored_only_as_hashes(store):
    key, secret = store.create("alice", "chat,route", rpm=60, usd_per_day=5)
    assert secret.startswith(f"jrk_{key.id}_") and len(secret) > 40
    assert key.scopes == ("route", "chat") and key.allows("route") and not key.allows("onboard")
    assert store.verify(secret) == key and store.verify(secret + "x") is None and store.verify("nonsense") is None
    with store._begin() as c:
        rows = [tuple(r) for r in c.exec_driver_sql("SELECT * FROM jeirt_api_keys")]
    assert rows and not any(secret in str(v) for r in rows for v in r)  # the key itself is nowhere
    assert [k.id for k in store.list()] == [key.id]
    assert [k.id for k in store.revoke("alice")] == [key.id]
    assert store.verify(secret) is None and store.list() == [] and store.list(revoked=True)[0].revoked
    with pytest.raises(LookupError, match="no live key"):
        store.revoke("alice")


def test_a_name_equal_to_another_keys_id_revokes_nothing_until_told_which(store):
    first, _ = store.create("first", "route")
    second, _ = store.create(first.id, "route")  # named like the first key's id
    with pytest.raises(LookupError, match="--by id or --by name"):
        store.revoke(first.id)
    assert {k.id for k in store.list()} == {first.id, second.id}
    assert [k.id for k in store.revoke(first.id, by="name")] == [second.id]
    assert [k.id for k in store.revoke(first.id, by="id")] == [first.id]


@pytest.mark.parametrize("scopes, message", [("route,write", "unknown scope"), ("", "at least one scope")])
def test_bad_scopes_are_refused(store, scopes, message):
    with pytest.raises(ValueError, match=message):
        store.create("bob", scopes)


def test_requests_per_minute_hold_exactly_under_16_concurrent_clients(store):
    """The conditional upsert admits exactly `rpm` in a minute, racing threads (each its own
    connection) or not; refused requests are not counted."""
    key, _ = store.create("busy", "route", rpm=10)
    now = 60 * int(time.time() // 60) + 1.0  # one calendar minute for the whole test
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        allowed = list(pool.map(lambda _: store.admit(key, now).allowed, range(64)))
    assert sum(allowed) == 10
    refused = store.admit(key, now)
    assert not refused.allowed and refused.limit == "rpm" and 1 <= refused.retry_after_s <= 60
    assert store.usage(key, now)["requests_minute"] == 10
    assert store.admit(key, now + 60).allowed  # the next minute


def test_spend_budgets_refuse_until_the_period_ends(store):
    key, _ = store.create("spender", "chat", usd_per_day=0.01, tpm=1000)
    now = time.time()
    assert store.admit(key, now).allowed
    store.record(key.id, tokens=10, usd=0.004, now=now)
    assert store.admit(key, now).allowed
    store.record(key.id, tokens=10, usd=0.007, now=now)  # in flight when the budget was reached: overshoots
    day = store.admit(key, now)
    assert not day.allowed and day.limit == "usd_per_day" and day.retry_after_s > 0
    assert day.usage["usd_day"] == pytest.approx(0.011)
    key2, _ = store.create("tokens", "chat", tpm=100)
    store.record(key2.id, tokens=150, now=now)
    assert store.admit(key2, now).limit == "tpm"


def test_grades_are_capped_per_minute_and_per_day_and_pruned(store):
    """One tenant cannot outvote the rest: a key's grades stop at its caps until the period ends;
    keys without caps are never counted; old grade counts are pruned like request counts."""
    key, _ = store.create("grader", "feedback", grades_per_minute=2, grades_per_day=3)
    assert store.verify(store.create("x", "route")[1]).grades_per_minute is None
    assert (key.grades_per_minute, key.grades_per_day) == (2, 3) and key.public()["grades_per_day"] == 3
    now = 1_800_000_000.0  # the start of a minute
    assert [store.admit_grade(key, now).allowed for _ in range(3)] == [True, True, False]
    refused = store.admit_grade(key, now)
    assert refused.limit == "grades_per_minute" and 0 < refused.retry_after_s <= 60
    assert store.admit_grade(key, now + 60).allowed  # a new minute: the day's third
    day = store.admit_grade(key, now + 120)
    assert not day.allowed and day.limit == "grades_per_day" and day.retry_after_s > 60
    assert store.admit(key, now).allowed  # requests are counted apart from grades
    assert store.prune(now + 63 * 86400) >= 3  # the grade minutes and the grade day are gone


def test_a_keys_grades_carry_its_weight_which_is_checked(store):
    light, secret = store.create("tenant", "feedback", grade_weight=0.25)
    assert store.verify(secret).grade_weight == 0.25 and light.public()["grade_weight"] == 0.25
    assert store.create("plain", "feedback")[0].grade_weight == 1.0
    for bad in (-1, float("nan"), 101, True):
        with pytest.raises(ValueError, match="weight must be a number from 0 to 100"):
            store.create("bad", "feedback", grade_weight=bad)


def test_old_counts_are_pruned(store):
    key, _ = store.create("old", "route")
    long_ago = time.time() - 90 * 86400
    store.admit(key, long_ago)
    store.record(key.id, tokens=5, usd=1.0, now=long_ago)
    assert store.usage(key, long_ago)["usd_day"] == 1.0
    store.admit(key)  # the first request a minute after the last pruning prunes
    old = store.usage(key, long_ago)
    assert old["requests_minute"] == 0 and old["usd_day"] == 0  # the old minute and the old day are gone
    assert store.usage(key)["requests_minute"] == 1  # this minute's count stays


def test_route_only_traffic_prunes_old_minutes(store):
    """Admissions alone (no spend recorded) keep the table bounded."""
    key, _ = store.create("route-only", "route")
    store.admit(key, time.time() - 600)
    store.admit(key)
    assert store.prune() == 0  # the admission already pruned the minute of 10 minutes ago


# ---- the access checks --------------------------------------------------------------------------

def check(access, scope, authorization=None):
    return asyncio.run(access.check(scope, authorization))


def test_required_mode_answers_401_403_429_as_declared(tmp_path):
    store = KeyStore(f"sqlite:///{tmp_path / 'keys.db'}")
    router, secret = store.create("router-only", "route", rpm=2)
    access = Access("required", store, token="admin-token-value")
    for scope in ("route", "chat", "onboard", "explore", "any"):
        with pytest.raises(Denied) as e:
            check(access, scope)
        assert e.value.status == 401 and e.value.headers["WWW-Authenticate"] == "Bearer"
    with pytest.raises(Denied) as e:
        check(access, "route", "Bearer jrk_00000000_" + "x" * 40)
    assert e.value.status == 401 and "unknown or revoked" in str(e.value)
    with pytest.raises(Denied) as e:
        check(access, "chat", f"Bearer {secret}")
    assert e.value.status == 403 and "'chat' scope" in str(e.value)
    key, admission = check(access, "route", f"Bearer {secret}")
    assert key.id == router.id and admission.usage["requests_minute"] == 1
    check(access, "route", f"Bearer {secret}")
    with pytest.raises(Denied) as e:
        check(access, "route", f"Bearer {secret}")
    assert e.value.status == 429 and int(e.value.headers["Retry-After"]) >= 1
    assert e.value.headers["x-ratelimit-remaining-requests"] == "0"
    assert check(access, "public") == (None, None)  # public
    assert check(access, "onboard", "Bearer admin-token-value")[0] is ADMIN_TOKEN_KEY


def test_open_mode_needs_no_key_but_checks_one_that_is_given(tmp_path):
    store = KeyStore(f"sqlite:///{tmp_path / 'keys.db'}")
    _, secret = store.create("limited", "route", rpm=1)
    access = Access("open", store, token=None)
    assert check(access, "route") == (None, None)
    assert check(access, "chat", "Bearer sk-placeholder") == (None, None)  # an SDK's placeholder
    check(access, "route", f"Bearer {secret}")
    with pytest.raises(Denied) as e:  # its limits still apply
        check(access, "route", f"Bearer {secret}")
    assert e.value.status == 429
    with pytest.raises(Denied) as e:
        check(access, "onboard")
    assert e.value.status == 401


def test_a_revoked_key_stops_working_within_the_cache_time(tmp_path):
    store = KeyStore(f"sqlite:///{tmp_path / 'keys.db'}")
    _, secret = store.create("soon-gone", "route")
    access = Access("required", store, token=None, cache_ttl_s=0.3)
    check(access, "route", f"Bearer {secret}")
    store.revoke("soon-gone")
    time.sleep(0.4)
    with pytest.raises(Denied) as e:
        check(access, "route", f"Bearer {secret}")
    assert e.value.status == 401


def test_an_unreachable_key_store_is_503_and_names_no_credentials(caplog):
    access = Access("required", KeyStore("postgresql+psycopg://jeirt:PLANTED-PW@127.0.0.1:1/db"), token=None)
    with caplog.at_level(logging.WARNING):
        with pytest.raises(Denied) as e:
            check(access, "route", "Bearer jrk_00000000_" + "y" * 40)
    assert e.value.status == 503 and e.value.headers["Retry-After"]
    assert "PLANTED-PW" not in str(e.value) and "PLANTED-PW" not in caplog.text


@pytest.mark.parametrize("prefix", ["", "/jeirt"])
def test_every_route_of_the_schema_is_closed_without_a_key_under_any_route_prefix(tmp_path, prefix):
    """The guard finds a request's route as Starlette's router does (Serve sets root_path to the
    route prefix and leaves the path whole), so no route is public by a prefix; a path that no
    route has is 404 before the app sees it; a websocket is refused."""
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from jeirt_ray.serving.access.guard import route_scopes
    from jeirt_ray.serving.app import api
    saved = getattr(api.state, "access", None)
    api.state.access = Access("required", KeyStore(f"sqlite:///{tmp_path / 'keys.db'}"), token=None)
    try:
        client = TestClient(api, root_path=prefix, raise_server_exceptions=False)
        schema = client.get(f"{prefix}/openapi.json").json()
        closed = [(m.upper(), p) for p, ops in schema["paths"].items() for m, op in ops.items()
                  if op.get("x-jeirt-scope") != "public"]
        assert len(closed) == 10  # route, feedback, chat, onboard, onboard/plan, models, similar, explore x2, keys/me
        for method, path in closed:
            r = client.request(method, prefix + path, json={})
            assert r.status_code == 401 and r.json()["error"].startswith("missing or malformed API key"), (path, r.text)
        public = {r.path for r in route_scopes(api) if r.scope == "public"}
        assert public == {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/static/{name}", "/health"}
        for path in ("/v1/secret", "/v1/route/x", "/v1"):
            assert client.post(prefix + path, json={}).status_code == 404
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect(f"{prefix}/v1/route") as ws:
                ws.receive_text()
    finally:
        api.state.access = saved


def test_a_route_that_declares_no_scope_stops_the_service():
    from fastapi import FastAPI

    from jeirt_ray.serving.access.guard import Unscoped, route_scopes, scoped
    app = FastAPI()
    app.get("/fine", **scoped("route"))(lambda: 1)
    app.get("/forgotten")(lambda: 2)
    with pytest.raises(Unscoped, match="'/forgotten' declares no scope"):
        route_scopes(app)


# ---- jeirt keys -----------------------------------------------------------------------------------

def test_cli_creates_lists_and_revokes_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("JEIRT_KEYS_URL", raising=False)
    runner = CliRunner()
    out = runner.invoke(cli, ["keys", "create", "--name", "ci", "--scopes", "route,chat", "--rpm", "5",
                              "--usd-per-day", "2.5"])
    assert out.exit_code == 0, out.output
    secret = out.output.strip().splitlines()[-1]
    assert secret.startswith("jrk_") and " " not in secret
    key = KeyStore().verify(secret)  # the default store: $JEIRT_HOME/keys.db
    assert key.name == "ci" and key.rpm == 5 and key.usd_per_day == 2.5
    listed = runner.invoke(cli, ["keys", "list"])
    assert listed.exit_code == 0 and key.id in listed.output and secret not in listed.output
    revoked = runner.invoke(cli, ["keys", "revoke", key.id])
    assert revoked.exit_code == 0 and KeyStore().verify(secret) is None


@pytest.mark.parametrize("args, code, words", [
    (["create", "--name", "x", "--scopes", "everything"], 2, "unknown scope(s) ['everything']"),
    (["create", "--name", "x", "--scopes", "route", "--rpm", "-1"], 2, "rpm must be >= 0"),
    (["revoke", "nobody"], 1, "no live key with id or name 'nobody'"),
    (["list", "--db", "postgresql+psycopg://u:PLANTED-PW@127.0.0.1:1/x"], 1, "cannot be used"),
])
def test_cli_bad_input_is_one_line(tmp_path, monkeypatch, args, code, words):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    out = CliRunner().invoke(cli, ["keys", *args])
    assert out.exit_code == code and words in out.output and "Traceback" not in out.output
    assert "PLANTED-PW" not in out.output


# ---- credentials out of messages -------------------------------------------------------------------

@pytest.mark.parametrize("text, secret", [
    ("cannot reach http://user:PLANTED@mlflow:5000/api", "PLANTED"),
    ("postgresql+psycopg://jeirt:PLANTED@db:5432/mlflow refused", "PLANTED"),
    ("GET https://host/x?api_key=PLANTED&y=1", "PLANTED"),
    ("header Authorization: Bearer PLANTED0123456789", "PLANTED"),
    ("a key jrk_0123abcd_PLANTEDPLANTEDPLANTED in a message", "PLANTED"),
])
def test_redact_strips_credentials(text, secret):
    assert secret not in redact(text) and "***" in redact(text)


def test_log_records_and_their_tracebacks_are_redacted():
    record = logging.LogRecord("jeirt.serve", logging.ERROR, __file__, 1, "could not reach %s", ("http://u:PW1@h",), None)
    try:
        raise ConnectionError("http://u:PW2@h refused")
    except ConnectionError:
        import sys
        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert "PW1" not in text and "PW2" not in text and "ConnectionError" in text


def test_a_registry_outage_names_no_credentials(monkeypatch, caplog):
    """A tracking URI with a password, its server down: what the live space reports (and logs)
    names the server without the password."""
    from jeirt_ray.serving.live import RegistryUnreachable, SpaceSource

    from .conftest import free_port
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    source = SpaceSource(f"http://user:TRACK-PLANTED@127.0.0.1:{free_port()}", "hashing-384")
    with caplog.at_level(logging.WARNING):
        with pytest.raises(RegistryUnreachable) as e:
            source.resolve("m", "champion")
    assert "127.0.0.1" in str(e.value) and "TRACK-PLANTED" not in str(e.value) + caplog.text


def test_open_mode_only_on_loopback_and_auth_required_overrides_any_config(tmp_path):
    from pathlib import Path

    import yaml

    from jeirt_ray.serving.deployment.deploy import load_config
    root = Path(__file__).resolve().parents[1] / "deployments"
    assert load_config(root / "local.yaml").applications[0].args["auth"] == "open"
    assert load_config(root / "local.yaml", auth="required").applications[0].args["auth"] == "required"
    assert load_config(root / "production.yaml").applications[0].args["auth"] == "required"
    with pytest.raises(ValueError, match="args.auth: open on host 0.0.0.0"):
        load_config(root / "production.yaml", auth="open")
    exposed = yaml.safe_load((root / "local.yaml").read_text())
    exposed["http_options"]["host"] = "0.0.0.0"
    (tmp_path / "exposed.yaml").write_text(yaml.safe_dump(exposed))
    with pytest.raises(ValueError, match="serve it on 127.0.0.1, or pass --auth required"):
        load_config(tmp_path / "exposed.yaml")
    assert load_config(tmp_path / "exposed.yaml", auth="required").applications[0].args["auth"] == "required"


class _Failing(http.server.BaseHTTPRequestHandler):
    """A tracking server that refuses every call (403, not retried), its body naming a planted
    secret."""

    def do_GET(self):
        body = b'{"error_code": "PERMISSION_DENIED", "message": "db at postgresql://mlflow:BODY-PLANTED@db refused"}'
        self.send_response(403)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("registry", ["down", "failing"])
def test_a_failing_onboarder_or_registry_names_no_credentials(monkeypatch, caplog, registry):
    """The Onboarder replica's own class, its tracking URI carrying a password, the registry down
    (503) or refusing with a body that names a password (the Router's 500): neither the exception
    as Ray ships it (its traceback), the answer the Router gives, nor any log line holds a planted
    secret."""
    import threading
    import traceback

    from starlette.requests import Request

    from jeirt_ray.serving.app import Onboarder
    from jeirt_ray.serving.http import _fault
    from jeirt_ray.serving.live import RegistryUnreachable

    from .conftest import free_port
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    port, server = free_port(), None
    if registry == "failing":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Failing)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    request = {"model": "new", "responses": [{"question_id": "q0", "label": 1.0}]}
    try:
        with caplog.at_level(logging.INFO):
            onboarder = Onboarder.func_or_class("m", "hashing-384", f"http://user:URI-PLANTED@127.0.0.1:{port}")
            with pytest.raises(Exception) as e:
                asyncio.run(onboarder.onboard(request, None))
            if registry == "down":
                assert isinstance(e.value, RegistryUnreachable) and "nothing was registered" in str(e.value)
                answer = "".join(traceback.format_exception(e.value))
            else:
                try:
                    raise RuntimeError("the Onboarder replica failed") from e.value  # as the Router sees it
                except RuntimeError as failure:
                    scope = {"type": "http", "method": "POST", "path": "/v1/onboard", "headers": []}
                    answer = asyncio.run(_fault(Request(scope), failure)).body.decode()
                assert "internal error" in answer and "PERMISSION_DENIED" in caplog.text  # logged, with its traceback
    finally:
        if server is not None:
            server.shutdown()
    assert "PLANTED" not in answer + caplog.text


def test_replicas_opening_a_new_key_store_at_once_all_open(postgres_url):
    """Replicas (here: stores of their own, from threads) making a new PostgreSQL database's
    tables at the same moment: the one that loses the race sees the winner's tables, no error
    (PostgreSQL's catalogue refuses the second CREATE TABLE; SQLite's stores take turns)."""
    import sqlalchemy as sa
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    for attempt in range(3):
        name = f"keys_race_{attempt}_{int(time.time() * 1000)}"
        with admin.connect() as c:
            c.exec_driver_sql(f"CREATE DATABASE {name}")
        url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda i: KeyStore(url).create(f"k{i}", "chat")[0].id, range(8)))
        assert sorted(k.id for k in KeyStore(url).list()) == sorted(made)
    admin.dispose()
