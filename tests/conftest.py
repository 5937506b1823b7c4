import contextlib
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SHARED_DATA = Path(os.environ.get("JEIRT_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def missing(reason: str):
    """A test whose service or data is not here: skipped on a developer's machine, a failure
    where JEIRT_REQUIRE_ALL=1 (.ci/run sets it: a test that skips in CI shows nothing)."""
    if os.environ.get("JEIRT_REQUIRE_ALL") == "1":
        pytest.fail(f"required in CI (JEIRT_REQUIRE_ALL=1), but {reason}", pytrace=False)
    pytest.skip(reason)


def shared_dataset(name: str) -> Path:
    """Path of a real dataset in ../shared/data, or skip the test saying why."""
    path = SHARED_DATA / name
    if not (path / "responses.csv.gz").exists():
        missing(f"real dataset {name!r} not found at {path.resolve()} (set JEIRT_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def synthetic():
    from jeirt_ray.data.synthetic import generate
    return generate(n_models=16, n_questions=600, seed=0)


def make_tiny_encoder(folder: Path) -> Path:
    """A 2-layer, 32-wide BERT sentence-transformers folder (random weights, a small word vocab),
    built offline: fine-tuning and serving tests need a real transformer, not a large one."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast
    words = ("the a of to and in is what which how many answer question model number value code "
             "math science history law physics chemistry sum total cost if then return def").split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *"abcdefghijklmnopqrstuvwxyz0123456789",
             *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789")]
    hf = folder / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / "vocab.txt").write_text("\n".join(vocab))
    BertTokenizerFast(vocab_file=str(hf / "vocab.txt")).save_pretrained(str(hf))
    import torch
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(str(hf))
    transformer = models.Transformer(str(hf), max_seq_length=64)
    st = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    st.save(str(folder / "st"), create_model_card=False)
    return folder / "st"


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


@contextlib.contextmanager
def registry_env(home: Path, token: str | None = None):
    """A registry (SQLite) and JEIRT_HOME under `home`, and optionally the API token, for the
    duration; set before a module's Ray cluster starts, so that Serve replicas inherit them."""
    keys = ("MLFLOW_TRACKING_URI", "JEIRT_HOME", "JEIRT_API_TOKEN")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(MLFLOW_TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}", JEIRT_HOME=str(home))
    if token:
        os.environ["JEIRT_API_TOKEN"] = token
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, ingress: str = "proxy", **init):
    """A fresh local Ray cluster (never a stranger's: address "local"), with the dashboard (Train's
    placement-group cleanup goes through the State API), Serve behind `ingress` (proxy or haproxy,
    as `jeirt serve --ingress`); Serve and Ray shut down on exit. `init`: more ray.init arguments
    (e.g. _metrics_export_port)."""
    import ray

    from jeirt_ray.serving.deployment.ingress import ingress_environ
    with ingress_environ(ingress):
        ray.init(address="local", num_cpus=num_cpus, log_to_driver=False, **init)
        try:
            yield
        finally:
            import gc

            from ray import serve
            try:
                serve.shutdown()
            finally:
                # object refs and handles a test left for the garbage collector are released while
                # the core worker is alive: one released after ray.shutdown() ends the process ("the
                # core worker has already been shutdown"), which a later module's run then loses
                gc.collect()
                ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster for the test module that asks for it."""
    with local_ray():
        yield


# Ray's fixed default ports: a port picked for something else before a Ray node starts must not be
# one of them (CI once drew 52365 for a head's dashboard, and the node's agent then collided with it)
RAY_DEFAULT_PORTS = {6379, 8265, 10001, 52365}


def free_port(taken: set[int] = frozenset()) -> int:
    """A free loopback port, none of Ray's fixed defaults nor any in `taken`."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS and port not in taken:
            return port


def local_serve_config(path: Path, edit=None, cpus: float | None = None, **args) -> Path:
    """deployments/local.yaml with `args` merged into the application's args, a free port, every
    replica's num_cpus set to `cpus` if given, and `edit(app)` applied to the application
    (deployments, user_config); written to `path`."""
    import yaml
    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "deployments" / "local.yaml").read_text())
    app = raw["applications"][0]
    app["args"].update(args)
    if cpus is not None:
        for d in app["deployments"]:
            d["ray_actor_options"]["num_cpus"] = cpus
    if edit:
        edit(app)
    raw["http_options"]["port"] = free_port()
    path.write_text(yaml.safe_dump(raw))
    return path


@contextlib.contextmanager
def serving(space, name: str, home: Path, *, token: str | None = None, edit=None, cpus: float | None = None,
            ray_init: dict | None = None, ingress: str = "proxy", **args):
    """`space` registered as models:/<name>@champion in a registry under `home`, served with
    local.yaml (see local_serve_config) on a local Ray cluster of 2 CPUs behind `ingress` (more
    ray.init arguments in `ray_init`); yields the base URL."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    from jeirt_ray.serving.deployment.deploy import deploy, load_config
    with registry_env(home, token):
        reg = SpaceRegistry()
        reg.promote(name, reg.register(space, name), "champion")
        path = local_serve_config(home / "serve.yaml", edit, cpus, model=name, **args)
        with local_ray(ingress=ingress, **(ray_init or {})):
            yield deploy(load_config(path))


def _postgres_binary(name: str) -> str | None:
    import glob
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)


class PostgresServer:
    """A throwaway PostgreSQL server (Debian's package) on a free loopback port, with a password
    (so that URLs carry credentials, as in production), fsync off; `stop()` and `start()` again on
    the same port and data (a restart)."""

    def __init__(self, folder: Path, as_user: list[str]):
        import secrets
        import subprocess
        self.folder, self.as_user = folder, as_user
        password = f"pg-{secrets.token_hex(8)}"
        (folder / "pw").write_text(password)
        os.chmod(folder / "pw", 0o644)
        subprocess.run(as_user + [_postgres_binary("initdb"), "-D", str(folder / "data"), "-U", "jeirt", "--pwfile",
                                  str(folder / "pw"), "--auth", "scram-sha-256", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True)
        self.port = free_port()
        self.url = f"postgresql+psycopg://jeirt:{password}@127.0.0.1:{self.port}/postgres"
        self.proc = None

    def start(self, timeout: float = 30) -> None:
        import subprocess

        import sqlalchemy
        with open(self.folder / "server.log", "ab") as log:
            self.proc = subprocess.Popen(self.as_user + [_postgres_binary("postgres"), "-D", str(self.folder / "data"),
                                                         "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.folder),
                                                         "-F", "-c", "max_connections=200"],
                                         stdout=log, stderr=subprocess.STDOUT)
        engine = sqlalchemy.create_engine(self.url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    with engine.connect():
                        return
                except sqlalchemy.exc.OperationalError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"PostgreSQL did not start: {(self.folder / 'server.log').read_text()[-2000:]}")
                    time.sleep(0.2)
        finally:
            engine.dispose()

    def stop(self) -> None:
        """A fast shutdown (SIGINT: open sessions are cut off), as a restarting database does."""
        import signal
        import subprocess
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGQUIT)  # immediate shutdown
                self.proc.wait()
        self.proc = None

    def _signal(self, sig: int) -> None:
        """Signal the server itself: under runuser (as root) the process started is runuser, which
        does not pass SIGINT on (the server then outlived the session)."""
        try:
            pid = int((self.folder / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # not started far enough to write it
            pid = self.proc.pid
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def postgres():
    """The session's PostgreSQL server; stopped and deleted at the end."""
    import tempfile
    if _postgres_binary("initdb") is None or _postgres_binary("postgres") is None:
        missing("PostgreSQL not found: apt-get install postgresql (.ci/run installs it)")
    folder = Path(tempfile.mkdtemp(prefix="jeirt-pg-"))
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the server runs as Debian's postgres user
        import pwd
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            missing("running as root without a postgres user to run PostgreSQL as (apt-get install postgresql)")
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        as_postgres = ["runuser", "-u", "postgres", "--"]
    server = PostgresServer(folder, as_postgres)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(postgres):
    """A SQLAlchemy URL of the session's PostgreSQL (its `postgres` database)."""
    return postgres.url


class TrackingServer:
    """`mlflow server` on a PostgreSQL database, artifacts proxied (--serve-artifacts), as
    k8s/mlflow.yaml runs it; `stop()` and `start()` again on the same port (an outage)."""

    def __init__(self, backend: str, artifacts: Path, log: Path):
        self.backend, self.artifacts, self.log = backend, artifacts, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout: float = 120) -> None:
        import subprocess
        import sys

        import httpx
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend, "--serve-artifacts",
                 "--artifacts-destination", self.artifacts.as_uri(), "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGKILL the server and its workers (its process group): an outage, not a shutdown."""
        import signal
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


@pytest.fixture(scope="module")
def tracking_server(postgres_url, tmp_path_factory):
    """An MLflow tracking server for the module, on a fresh database of the session's PostgreSQL;
    stopped (with its workers) at the end."""
    import secrets

    import sqlalchemy
    db = f"mlflow_{secrets.token_hex(4)}"
    engine = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE {db}")
    engine.dispose()
    folder = tmp_path_factory.mktemp("mlflow-server")
    server = TrackingServer(f"{postgres_url.rsplit('/', 1)[0]}/{db}", folder / "artifacts", folder / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Load:
    """`clients` threads posting /v1/route until stopped; counts answers and failures by time."""

    def __init__(self, url: str, clients: int = 4):
        self.url, self.stop, self.lock = url, threading.Event(), threading.Lock()
        self.ok, self.failed = 0, []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self):
        import httpx
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                try:
                    r = client.post(f"{self.url}/v1/route", json={"query": "what is the sum of 2 and 3?"})
                    good, why = r.status_code == 200, r.status_code
                except httpx.HTTPError as e:
                    good, why = False, type(e).__name__
                with self.lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failed.append((time.time(), why))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def wait_for(predicate, timeout: float = 20.0) -> bool:
    """Poll `predicate` every 0.5 s until it holds (True) or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False
