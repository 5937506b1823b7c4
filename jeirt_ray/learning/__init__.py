"""Routing that learns from its own traffic: outcomes update the LLMs' vectors (online.py),
exploration within a budget with recorded propensities (explore.py), and the off-policy
evaluation of any policy on logged traffic (offpolicy.py). Above routing and the model in the
layers; below experiments, serving and the API."""

from .explore import Decision, Explorer, Pacer, PolicyExploration
from .offpolicy import evaluate_policy, one_hot
from .online import LOOP_DEFAULTS, OnlineState, Outcomes

__all__ = ["LOOP_DEFAULTS", "Decision", "Explorer", "OnlineState", "Outcomes", "Pacer", "PolicyExploration", "evaluate_policy", "one_hot"]
