"""The web explorer: what it shows of a served space (views.py) and its page (static/)."""
