"""The paper's science as studies over a trained space (jeirt report)."""
