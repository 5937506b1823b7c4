"""The replicas behind the Router: the Encoder (the frozen text encoder; @serve.batch merges
concurrent queries into one forward) and the Onboarder (an OnboardingService, onboarding.py, one
request at a time). Each puts the redacting log filter on its own loggers: a tracking URI may
carry credentials."""

import numpy as np
from ray import serve

from ..encoders import make_encoder
from .metrics import make_metrics
from .offload import Offload
from .onboarding import OnboardingService
from .schemas import OnboardRequest
from .settings import EncoderConfig, OnboarderConfig


class ThreadedEncoder:
    """An encoder whose forward runs in a worker thread (the event loop keeps taking requests,
    and the next batch gathers while this one computes) with `threads` torch threads, or on the
    loop where it is that cheap (`offload`: the hashing encoder, not MiniLM). Torch's thread count
    is per calling thread under OpenMP, and Ray sets OMP_NUM_THREADS to the replica's num_cpus,
    so it is set in the thread that runs the forward."""

    def __init__(self, spec: str, threads: int | None, tracking_uri: str | None = None):
        if spec.startswith("models:/"):  # the encoder saved with a registered (fine-tuned) space
            from ..tracking.registry import SpaceRegistry
            spec = str(SpaceRegistry(tracking_uri).download_encoder(spec))
        self.encoder, self.threads = make_encoder(spec), threads
        self.offload = Offload()
        self.forward(["warm-up"])  # load the weights before the first request

    def forward(self, texts: list[str]) -> np.ndarray:
        if self.threads:
            import torch
            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
        return self.encoder.encode(texts)

    async def encode(self, texts: list[str]) -> np.ndarray:
        return await self.offload.run(self.forward, texts, items=len(texts))


@serve.deployment(name="Encoder")
class Encoder:
    def __init__(self, encoder: str, threads: int | None = None, tracking_uri: str | None = None):
        from ..core.secrets import redact_logs
        redact_logs("jeirt", "ray.serve", "mlflow")  # every replica, not only the Router: a tracking URI may carry credentials
        self.encoder = ThreadedEncoder(encoder, threads, tracking_uri)
        self.metrics = make_metrics()

    def reconfigure(self, user_config: dict) -> None:
        self.encode.set_batch_wait_timeout_s(EncoderConfig(**user_config).batch_wait_s)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)  # no waiting alone; batches form under load
    async def encode(self, texts: list[str]) -> list[np.ndarray]:
        self.metrics.encoder_batch(len(texts))
        return list(await self.encoder.encode(texts))

    async def encode_many(self, texts: list[str]) -> np.ndarray:
        """A request's own batch (e.g. onboarding by text) in one call."""
        return await self.encoder.encode(texts)


@serve.deployment(name="Onboarder")
class Onboarder:
    def __init__(self, model: str, encoder_id: str, tracking_uri: str | None = None):
        from ..core.secrets import redact_logs
        from ..tracking.registry import bound_http_retries
        redact_logs("jeirt", "ray.serve", "mlflow")
        bound_http_retries()
        self.service = OnboardingService(model, encoder_id, tracking_uri)

    def reconfigure(self, user_config: dict) -> None:
        self.service.alias = OnboarderConfig(**user_config).alias

    async def onboard(self, request: dict, text_vectors: np.ndarray | None) -> dict:
        return await self.service.onboard(OnboardRequest(**request), text_vectors)
