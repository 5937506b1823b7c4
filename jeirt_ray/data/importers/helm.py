"""HELM run folders (run_spec.json, scenario_state.json, per_instance_stats.json)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..errors import DataError
from .collector import LFS_FIX, Collector, is_lfs_pointer, label_value

HELM_METRICS = ("exact_match", "quasi_exact_match")


def read_helm(src: str | Path, metric: str | None = None, progress: bool = True) -> Collector:
    src, col = Path(src), Collector()
    runs = sorted(p.parent for p in src.rglob("per_instance_stats.json"))
    if not runs:
        raise DataError("no HELM run folders (per_instance_stats.json) under this folder", file=str(src))
    for run in tqdm(runs, desc="importing HELM runs", unit="run", disable=not progress):
        col.files += 1
        stubs = [p for p in (run / "run_spec.json", run / "scenario_state.json", run / "per_instance_stats.json")
                 if is_lfs_pointer(p)]
        if stubs:
            col.skip(LFS_FIX, file=str(stubs[0]))
            continue
        try:
            spec = json.loads((run / "run_spec.json").read_text(encoding="utf-8"))
            state = json.loads((run / "scenario_state.json").read_text(encoding="utf-8"))
            stats = json.loads((run / "per_instance_stats.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            col.skip(f"unreadable run ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=str(run))
            continue
        model = (spec.get("adapter_spec") or {}).get("model")
        name = str(spec.get("name") or run.name)
        if not model:
            col.skip("run_spec.json names no adapter_spec.model", file=str(run / "run_spec.json"))
            continue
        scenario = re.sub(r"(^|,)model=[^,]*", "", name.split(":", 1)[1] if ":" in name else "").strip(",")
        benchmark = name.split(":", 1)[0]
        prefix = f"{benchmark}:{scenario}" if scenario else benchmark
        choices = str((spec.get("adapter_spec") or {}).get("method") or "").startswith("multiple_choice")
        texts = {}
        for rs in state.get("request_states") or []:
            inst = rs.get("instance") or {}
            if inst.get("perturbation") or inst.get("id") is None:
                continue
            text = (inst.get("input") or {}).get("text")
            if isinstance(text, str) and text.strip():
                texts.setdefault(str(inst["id"]), _helm_text(text.strip(), inst, choices))
        sums: dict[str, list[float]] = defaultdict(list)
        file = str(run / "per_instance_stats.json")
        for n, entry in enumerate(stats, 1):
            if entry.get("perturbation"):
                continue
            by_name = {s["name"]["name"]: s for s in entry.get("stats") or []
                       if isinstance(s.get("name"), dict) and not s["name"].get("perturbation")}
            chosen = metric or next((m for m in HELM_METRICS if m in by_name), None)
            if chosen is None or chosen not in by_name:
                col.skip(f"no label metric (tried {metric or list(HELM_METRICS)}; choose one with --metric NAME)",
                         file=file, record=n, column="stats", value=sorted(by_name)[:8])
                continue
            try:
                sums[str(entry.get("instance_id"))].append(label_value(by_name[chosen].get("mean"),
                                                                  {"file": file, "record": n}, chosen))
            except DataError as e:
                col.skipped.append(str(e))
        for iid, values in sums.items():
            if iid not in texts:
                col.skip("instance has no input text in scenario_state.json", file=file, column="instance_id", value=iid)
                continue
            col.add(model, col.question(f"{prefix}/{iid}", benchmark, texts[iid]), float(np.mean(values)))
    return col


def _helm_text(text: str, instance: dict, choices: bool) -> str:
    """A multiple-choice instance's input with its options (the references the model chose from),
    lettered as HELM's joint adapter shows them: what the model saw, and what the question's
    embedding should carry."""
    refs = [((r.get("output") or {}).get("text") or "").strip() for r in instance.get("references") or []]
    if not choices or len(refs) < 2:
        return text
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return text + "\n" + "\n".join(f"{letters[i] if i < 26 else i + 1}. {r}" for i, r in enumerate(refs))
