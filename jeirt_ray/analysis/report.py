"""`jeirt report` / `jeirt analyze STUDY`: run the paper's studies (analysis.studies) on one dataset
and write report.md, report.html, PNGs and results.json (analysis.render)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..experiments.prepare import Prepared
from ..model.space import CoreSpace
from .render import html_page, markdown
from .studies import STUDIES, Study

__all__ = ["STUDIES", "run_report"]


def run_report(prep: Prepared, space: CoreSpace, out: str | Path, seed: int = 0, studies: list[str] | None = None,
               costs: np.ndarray | None = None, progress: bool = True, prices=None,
               answer_tokens: np.ndarray | None = None) -> dict:
    """Run `studies` (default: all of STUDIES; lobo is left out where there are fewer than 3
    benchmarks, cost without `prices`) and write results.json, report.md, report.html and the PNGs into `out`."""
    unknown = sorted(set(studies or []) - set(STUDIES))
    if unknown:
        raise ValueError(f"unknown studies {unknown}; known: {list(STUDIES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = prep.data
    if studies is None:
        studies = [n for n in STUDIES if (n != "lobo" or len(set(data.benchmarks.tolist())) >= 3)
                   and (n != "cost" or prices is not None)]
    ctx = Study(prep, space, out, seed, costs, progress, prices, answer_tokens)
    results: dict = {"data": data.name, "synthetic": bool(data.synthetic), "questions": int(data.n_questions),
                     "llms": int(data.n_models), "space": {"recipe": space.metadata.get("recipe"),
                                                           "members": len(space.members), "dim": space.config.dim}}
    for name in STUDIES:
        if name in studies:
            results[name] = STUDIES[name](ctx)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    md = markdown(results)
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(html_page(md))
    return results
