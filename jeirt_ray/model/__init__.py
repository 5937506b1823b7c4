"""The JE-IRT model and its baselines: modules, training, the space (`space.CoreSpace`), onboarding, metrics."""
