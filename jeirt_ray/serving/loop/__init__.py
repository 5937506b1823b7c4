"""A Router replica's side of the learning loop: its decisions logged and graded (recording.py), learned
from (learned.py), and routed in shadow by a challenger (shadow.py)."""
