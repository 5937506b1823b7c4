"""`jeirt similar`: the LLMs of a space that answer alike (a zoo's twins)."""

from __future__ import annotations

import json
import math

import typer
from rich.table import Table

from .output import console, expected_failures


def similar_cmd(name: str = typer.Argument(..., help="an LLM of the space"),
                space: str = typer.Option("models:/demo@champion", "--space", help="the space: "
                                          "models:/<name>@<alias>, models:/<name>/<version>, or a saved folder"),
                k: int = typer.Option(10, "-k", "--k", min=1, help="how many LLMs to list"),
                by: str = typer.Option("agreement", "--by", help="order by agreement (on the questions both "
                                       "answered) or cosine (of their vectors)"),
                as_json: bool = typer.Option(False, "--json", help="print JSON")):
    """The K LLMs that answer most like NAME: their agreement on the questions both answered and the
    cosine of their vectors (twins: fine-tunes and merges of one base)."""
    from ..api.space import Space
    with expected_failures():
        s = Space.load(space)
        table = s.similar(name, k, by=by)
    rows = [{c: (None if isinstance(v, float) and math.isnan(v) else v) for c, v in r.items()}
            for r in table.to_dict("records")]
    if as_json:
        print(json.dumps({"llm": name, "by": by, "similar": rows}, indent=1))
        return
    out = Table(title=f"the LLMs most like {name} (by {by}; {len(s.model_names)} in the space)")
    for col in ("LLM", "agreement", "shared questions", "cosine", "size (B)"):
        out.add_column(col)
    for r in rows:
        out.add_row(r["llm"], "-" if r["agreement"] is None else f"{r['agreement']:.3f}", str(r["shared"]),
                    f"{r['cosine']:.3f}", "-" if r["params_b"] is None else f"{r['params_b']:g}")
    console.print(out)
