"""Onboarding's defaults, one per setting for every door (CLI, Python, HTTP); import-light, so
that the CLI can show them without loading the model."""

DEFAULT_TARGET_WIDTH = 0.04  # stop when the vector's part of the 90% interval of the predicted accuracy is narrower
DEFAULT_BATCH = 10  # questions planned at a time (`plan`'s k; onboarding's rounds)
DEFAULT_MAX_ANSWERS = 50  # answers graded at most when onboarding from an endpoint

# How the questions are chosen: the share of each batch drawn in a seeded random order (its
# answers carry the accuracy estimate's correction, model/estimate.py), the rest adaptively
# (model/adaptive.py: those that tell most about the new LLM). `stratified` draws its order
# spread evenly over the benchmarks; `weighted` draws it with known unequal probabilities, more
# often where the known LLMs' answers are uncertain (model/estimate.py draw_probabilities);
# `mixed` asks adaptively for its first MIXED_ADAPTIVE_FIRST answers, then in random order;
# `anchored` asks the space's anchor questions in order, chosen on its known LLMs' answers
# (model/anchors.py), and estimates the accuracy from them: the default of estimating and both
# wherever the space keeps the answers of enough known LLMs (hundreds), random elsewhere.
STRATEGY_SHARE = {"adaptive": 0.0, "mixed": None, "random": 1.0, "stratified": 1.0, "weighted": 1.0, "anchored": 1.0}
STRATEGIES = tuple(STRATEGY_SHARE)
MIXED_ADAPTIVE_FIRST = 20
# What the answers are for: routing (the vector), estimating (the accuracy), or both. Each
# purpose's strategy is the one never shown worse than random on what the purpose cares about
# and best there, on the validation split of mmlu_pro and zeroeval (`benchmarks/onboarding_choice.py`;
# docs/results/benchmarks.md, "Onboarding from few answers"): adaptive answers place the LLM
# best for routing but bias its accuracy estimate (zeroeval's strongest LLMs), so estimating
# and both take random questions.
PURPOSE_STRATEGY = {"route": "adaptive", "estimate": "random", "both": "random"}
PURPOSES = tuple(PURPOSE_STRATEGY)
DEFAULT_PURPOSE = "both"


def random_share(strategy: str, answered: int, adaptive_first: int = MIXED_ADAPTIVE_FIRST) -> float:
    """The share of the next batch drawn in random order, after `answered` answers (`mixed`:
    none until `adaptive_first` answers, then all)."""
    share = STRATEGY_SHARE[strategy]
    return share if share is not None else float(answered >= adaptive_first)


def check_strategy(strategy: str | None, purpose: str) -> str:
    """The strategy to use: `strategy` if given, else the one `purpose` picks; a clear error
    for an unknown name of either."""
    if purpose not in PURPOSE_STRATEGY:
        raise ValueError(f"purpose must be one of {', '.join(PURPOSES)}, not {purpose!r}")
    if strategy is not None and strategy not in STRATEGY_SHARE:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    return strategy or PURPOSE_STRATEGY[purpose]
