"""Onboarding's defaults, one per setting for every door (CLI, Python, HTTP); import-light, so
that the CLI can show them without loading the model."""

DEFAULT_TARGET_WIDTH = 0.04  # stop when the vector's part of the 90% interval of the predicted accuracy is narrower
DEFAULT_BATCH = 10  # questions planned at a time (`plan`'s k; onboarding's rounds)
DEFAULT_MAX_ANSWERS = 50  # answers graded at most when onboarding from an endpoint
