"""A model zoo of thousands of LLMs: the served LLMs listed a page at a time and chosen by name,
glob or size (catalog.py), and the LLMs that answer alike (similar.py)."""
