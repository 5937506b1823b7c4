"""Where the project keeps its files: one folder, JEIRT_HOME (default ./.jeirt). Nothing is
created on import."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("JEIRT_HOME", ".jeirt"))


def cache_dir() -> Path:
    return home() / "cache"
