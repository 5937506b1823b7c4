"""`jeirt <command>`: `main` (the Typer app), `data` (`jeirt data ...`, `jeirt registry ...`) and
`output` (tables, expected failures as one line)."""

from .main import app, main

__all__ = ["app", "main"]
