"""jeirt-ray: joint-embedding item response theory (JE-IRT) for LLMs.

    import jeirt_ray as jr
    data = jr.load_data("path/to/dataset")       # or None: the embedded SYNTHETIC dataset
    space = jr.train(data, encoder="hashing", search=False)
    space.predict(["What is 2 + 2?"])            # P(correct), one column per LLM
    space.route(["What is 2 + 2?"])[0]["chosen"]
    jr.evaluate(data, methods=["jeirt", "mf"], search=False)

The names in `__all__` are the public API; everything else is importable but not needed. They
load on first use, so that `import jeirt_ray` (and the `jeirt` command) start without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "Space": "api.space", "Registry": "api.space",
    "ResponseData": "data", "Split": "data", "DataError": "data", "Prepared": "experiments.prepare",
    "RouteDecision": "routing.decisions", "KeyStore": "serving.access.keys", "AnswerKey": "data.answer_key",
    "onboard_endpoint": "api.onboard_endpoint", "Learner": "api.learner", "evaluate_policy": "learning.offpolicy",
    "Imported": "api.jobs", "load_data": "api.jobs", "import_results": "api.jobs", "prepare": "api.jobs",
    "train": "api.jobs", "evaluate": "api.jobs", "register": "api.jobs", "demo": "api.jobs", "report": "api.jobs",
}
__all__ = ["Space", "Registry", "ResponseData", "Split", "DataError", "Prepared", "RouteDecision", "KeyStore", "Imported",
           "AnswerKey", "onboard_endpoint", "Learner", "evaluate_policy",
           "load_data", "import_results", "prepare", "train", "evaluate", "register", "demo", "report", "__version__"]

if TYPE_CHECKING:  # for type checkers and the API reference
    from .api.space import Registry, Space
    from .data import DataError, ResponseData, Split
    from .experiments.prepare import Prepared
    from .routing.decisions import RouteDecision
    from .serving.access.keys import KeyStore
    from .data.answer_key import AnswerKey
    from .api.onboard_endpoint import onboard_endpoint
    from .api.learner import Learner
    from .learning.offpolicy import evaluate_policy
    from .api.jobs import Imported, demo, evaluate, import_results, load_data, prepare, register, report, train


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jeirt_ray' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
