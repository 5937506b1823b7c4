"""The LLMs of a space as a catalog: paged and filtered listings (`GET /v1/models`), and the
candidates a request allows, named as a list, a glob ("*Mistral*") or a size bound
(`max_params_b`). Sizes come from the training folder's models.csv (space.metadata["llms"]) or
were given at onboarding."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import numpy as np

GLOB_CHARS = re.compile(r"[*?\[]")
DEFAULT_PAGE = 100
MAX_PAGE = 1000


class NoCandidates(ValueError):
    """A candidate filter that leaves no LLM (HTTP 400: the client chose the filter)."""


class BadFilter(ValueError):
    """A candidate filter that is not one (a size that is no number, an unknown key): HTTP 422."""


class UnknownLLMs(LookupError):
    """Candidates named exactly (no glob) that the space does not have (HTTP 404)."""

    def __init__(self, names: list[str], served: int):
        super().__init__(f"unknown candidate LLM(s) {names[:10]}{' ...' if len(names) > 10 else ''}; this space "
                         f"serves {served} LLMs (GET /v1/models?contains=... finds them; a glob like \"*name*\" "
                         f"matches them)")
        self.names = names


def is_glob(text: str) -> bool:
    return bool(GLOB_CHARS.search(text))


@dataclass
class CandidateFilter:
    """What a request allows: `names` (exact names, or globs, matched without regard to case),
    and `max_params_b` (LLMs of known size up to this many billion parameters)."""
    names: list[str] | None = None
    max_params_b: float | None = None

    @classmethod
    def of(cls, candidates, max_params_b: float | None = None) -> "CandidateFilter":
        """From a request's `candidates` (None, a list of names or globs, one glob, or an object with
        `names` and `max_params_b`) and its own `max_params_b`."""
        max_params_b = _size(max_params_b)
        if isinstance(candidates, CandidateFilter):
            return cls(candidates.names, _tighter(candidates.max_params_b, max_params_b))
        if hasattr(candidates, "model_dump"):  # the request schema's object form
            candidates = candidates.model_dump(exclude_none=True)
        if isinstance(candidates, dict):
            unknown = sorted(set(candidates) - {"names", "max_params_b"})
            if unknown:
                raise BadFilter(f"candidates: unknown key(s) {unknown}; an object takes names and max_params_b")
            return cls(_listed(candidates.get("names")), _tighter(_size(candidates.get("max_params_b")), max_params_b))
        return cls(_listed(candidates), max_params_b)

    @property
    def empty(self) -> bool:
        return self.names is None and self.max_params_b is None

    def describe(self) -> str:
        parts = []
        if self.names is not None:
            parts.append(f"candidates {self.names[:10]}{' ...' if len(self.names) > 10 else ''}")
        if self.max_params_b is not None:
            parts.append(f"max_params_b {self.max_params_b:g}")
        return " and ".join(parts)


def _listed(names) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        return [names]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise BadFilter(f"candidates must be LLM names or globs (a string or a list of them), not {names!r:.80}")
    return list(names)


def _size(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 10 ** 300:
        return float("inf")  # beyond a float's range: no bound (np.isfinite cannot take such an int)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
        raise BadFilter(f"max_params_b must be a number of billions of parameters, at least 0, not {value!r:.80}")
    return float(value)


def _tighter(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


class Catalog:
    """The served LLMs in their space's order, with what is known of each (`params_b`)."""

    def __init__(self, names: list[str], info: dict[str, dict] | None = None):
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        info = info or {}
        self.info = {n: info[n] for n in self.names if n in info}
        self.params_b = np.array([self.info.get(n, {}).get("params_b", np.nan) for n in self.names], dtype=float)
        self._lower = [n.lower() for n in self.names]

    @classmethod
    def of_space(cls, space) -> "Catalog":
        return cls(space.model_names, space.metadata.get("llms"))

    @property
    def sized(self) -> int:
        return int(np.isfinite(self.params_b).sum())

    def _by_size(self, cand: np.ndarray, max_params_b: float) -> np.ndarray:
        if not self.sized:
            raise NoCandidates(f"max_params_b {max_params_b:g}: the space knows no LLM's size (train on a folder "
                               f"with models.csv, or onboard with params_b)")
        with np.errstate(invalid="ignore"):
            return cand[self.params_b[cand] <= max_params_b]

    def select(self, spec: CandidateFilter | None) -> np.ndarray | None:
        """Column indices the filter allows, in the space's order (None: every LLM). Exact names
        the space lacks: UnknownLLMs; a filter that leaves none: NoCandidates, naming it."""
        if spec is None or spec.empty:
            return None
        cand = np.arange(len(self.names))
        if spec.names is not None:
            if not spec.names:
                raise NoCandidates("candidates is empty: name at least one LLM or glob, or leave it out for all")
            exact = [n for n in spec.names if not is_glob(n)]
            unknown = [n for n in exact if n not in self.index]
            if unknown:
                raise UnknownLLMs(unknown, len(self.names))
            chosen = [self.index[n] for n in exact]
            for pattern in (n for n in spec.names if is_glob(n)):
                rx = re.compile(fnmatch.translate(pattern.lower()))
                chosen += [i for i, n in enumerate(self._lower) if rx.match(n)]
            cand = np.array(list(dict.fromkeys(chosen)), dtype=np.int64)
        if spec.max_params_b is not None:
            cand = self._by_size(cand, spec.max_params_b)
        if not len(cand):
            raise NoCandidates(f"no LLM of the space's {len(self.names)} matches {spec.describe()}")
        return cand

    def page(self, limit: int = DEFAULT_PAGE, after: str | None = None, contains: str | None = None,
             max_params_b: float | None = None) -> tuple[list[int], bool]:
        """(the indices of one page of the LLMs whose name contains `contains` (any case) and whose
        size is at most `max_params_b`, after the LLM `after`; whether more follow)."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be 1 to {MAX_PAGE}, got {limit}")
        start = 0
        if after is not None:
            if after not in self.index:
                raise LookupError(f"after: no LLM {after!r} in this space (give the last id of the page before)")
            start = self.index[after] + 1
        cand = np.arange(start, len(self.names))
        if contains:
            needle = contains.lower()
            cand = np.array([i for i in cand if needle in self._lower[i]], dtype=np.int64)
        if max_params_b is not None:
            cand = self._by_size(cand, max_params_b) if len(cand) else cand
        return [int(i) for i in cand[:limit]], len(cand) > limit


def model_cards(router, rows: list[int], version: str) -> list[dict]:
    """`GET /v1/models`' entries for the LLMs `rows` of a space's router (routing.router.SpaceRouter):
    OpenAI's model object, with the registry version, prices and size."""
    prices, per_call, sizes = router.prices, router.usd_per_call, router.catalog.params_b
    return [{"id": router.names[i], "object": "model", "owned_by": "jeirt", "registry_version": version,
             **dict.fromkeys(("usd_per_call", "cost"), None if per_call is None else float(per_call[i])),
             "input_usd_per_mtok": None if prices is None else float(prices.input_usd_per_mtok[i]),
             "output_usd_per_mtok": None if prices is None else float(prices.output_usd_per_mtok[i]),
             "params_b": float(sizes[i]) if np.isfinite(sizes[i]) else None} for i in rows]


def record_size(metadata: dict, name: str, params_b: float) -> None:
    """Keep LLM `name`'s size in a space's metadata (what the catalog filters by)."""
    metadata.setdefault("llms", {}).setdefault(name, {})["params_b"] = float(params_b)
