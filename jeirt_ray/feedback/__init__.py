"""The feedback loop: every routed query logged (log.py: Parquet by day, written off the request
path), graded (store.py: feedback by decision id, once per source). Below serving, which logs and
takes feedback; above Ray, experiments and learning, which read and learn from it."""

from .log import DecisionLog, LogSettings, find, id_time, new_id
from .store import Conflict, FeedbackStore, Grade

__all__ = ["Conflict", "DecisionLog", "FeedbackStore", "Grade", "LogSettings", "find", "id_time", "new_id"]
