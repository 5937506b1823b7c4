import contextlib
import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SHARED_DATA = Path(os.environ.get("JEIRT_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def shared_dataset(name: str) -> Path:
    """Path of a real dataset in ../shared/data, or skip the test saying why."""
    path = SHARED_DATA / name
    if not (path / "responses.csv.gz").exists():
        pytest.skip(f"real dataset {name!r} not found at {path.resolve()} (set JEIRT_SHARED_DATA)")
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
def local_ray(num_cpus: int = 2, **init):
    """A fresh local Ray cluster (never a stranger's: address "local"), with the dashboard (Train's
    placement-group cleanup goes through the State API); Serve and Ray shut down on exit. `init`:
    more ray.init arguments (e.g. _metrics_export_port)."""
    import ray
    ray.init(address="local", num_cpus=num_cpus, log_to_driver=False, **init)
    try:
        yield
    finally:
        from ray import serve
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster for the test module that asks for it."""
    with local_ray():
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            ray_init: dict | None = None, **args):
    """`space` registered as models:/<name>@champion in a registry under `home`, served with
    local.yaml (see local_serve_config) on a local Ray cluster of 2 CPUs (more ray.init arguments
    in `ray_init`); yields the base URL."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    from jeirt_ray.serving.deploy import deploy, load_config
    with registry_env(home, token):
        reg = SpaceRegistry()
        reg.promote(name, reg.register(space, name), "champion")
        path = local_serve_config(home / "serve.yaml", edit, cpus, model=name, **args)
        with local_ray(**(ray_init or {})):
            yield deploy(load_config(path))
