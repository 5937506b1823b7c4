"""Bulk onboarding on Ray: every LLM of a results folder fitted into a registered space at once
(`jeirt onboard --from-data DIR --space models:/NAME@champion`), for a zoo that adds LLMs by the
hundred. Each LLM's vector is fitted from its answers to the space's questions with every question
frozen (model/onboarding.py: the same Newton fit and population prior as one LLM at a time), in
Ray tasks of `chunk` LLMs; finished LLMs are appended to a state file as they come back, so a rerun
of the same command resumes; an LLM that cannot be fitted is reported by name and skipped. At the
end the space gets every fitted LLM in one new registered version."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np

from ..core import paths
from ..data import DataError, load_data
from ..model.onboarding import directions, fit_row, member_priors
from ..model.space import CoreSpace, answer_table
from ..tracking.registry import SpaceRegistry

log = logging.getLogger("jeirt.onboard")
CHUNK = 50  # LLMs per Ray task: large enough that a task's overhead is small next to its fits


def _fit_chunk(dirs, priors, work: list[tuple[str, np.ndarray, np.ndarray]]) -> list[dict]:
    """Fit each (name, question rows, labels): {"llm", "vectors" (per member), "vector_var",
    "responses"} or {"llm", "error"}."""
    out = []
    for name, rows, labels in work:
        try:
            fits = [fit_row(u[rows], n[rows], labels, *prior) for (u, n), prior in zip(dirs, priors)]
            vectors = [f.theta.astype(np.float32) for f in fits]
            if not all(np.isfinite(v).all() for v in vectors):
                raise FloatingPointError("the fit did not converge to finite numbers")
            out.append({"llm": name, "responses": int(len(labels)), "vectors": [v.tolist() for v in vectors],
                        "vector_var": [[float(f"{v:.4g}") for v in np.diag(f.cov)] for f in fits]})
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as e:
            out.append({"llm": name, "error": f"{type(e).__name__}: {e}"})
    return out


def state_path(space_uri: str, version: int | str, folder: Path) -> Path:
    """Where a bulk onboarding of `folder` into that version keeps what it has fitted."""
    key = hashlib.sha256(f"{space_uri}|{version}|{folder.resolve()}".encode()).hexdigest()[:12]
    return paths.home() / "onboarding" / "bulk" / f"{folder.name}-{key}.jsonl"


def _read_state(path: Path) -> dict[str, dict]:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill: that LLM is fitted again
                continue
            done[row["llm"]] = row
    return done


def plan_work(space: CoreSpace, folder: Path, replace: bool):
    """(the work per LLM, what is reported of the folder): each LLM of the folder that has answers
    to the space's questions; LLMs the space already has are skipped unless `replace`."""
    data = load_data(folder)
    pos = {q: i for i, q in enumerate(space.question_ids)}
    q_rows = np.array([pos.get(q, -1) for q in data.question_ids], dtype=np.int64)
    known = set(space.model_names)
    work, skipped = [], []
    order = np.argsort(data.m_idx, kind="stable")
    bounds = np.searchsorted(data.m_idx[order], np.arange(data.n_models + 1))
    for m, name in enumerate(data.models):
        name = str(name)
        if name in known and not replace:
            skipped.append({"llm": name, "reason": "already in the space (--replace refits it)"})
            continue
        sel = order[bounds[m]:bounds[m + 1]]
        rows, labels = q_rows[data.q_idx[sel]], data.labels[sel].astype(np.float64)
        keep = rows >= 0
        if not keep.any():
            skipped.append({"llm": name, "reason": "none of its answers is to a question of the space"})
            continue
        work.append((name, rows[keep], labels[keep]))
    outside = int((q_rows < 0).sum())
    return work, {"llms": int(data.n_models), "questions": int(data.n_questions), "questions_not_in_space": outside,
                  "skipped": skipped, "llm_info": data.extra.get("llms") or {}}


def onboard_folder(folder: str | Path, space_uri: str, *, register: str | None = None, promote: bool = False,
                   replace: bool = False, chunk: int = CHUNK, tracking_uri: str | None = None,
                   progress: bool = True, state: str | Path | None = None) -> dict:
    """Onboard every LLM of results folder `folder` into the registered space `space_uri` on the
    connected Ray cluster (init_ray() first) and register the result as one new version of
    `register` (default: the space's own name); `promote` moves the alias of `space_uri` to it
    (compare-and-set: not if the alias moved meanwhile). Returns the report."""
    import ray
    from tqdm.auto import tqdm

    folder = Path(folder)
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    registry = SpaceRegistry(tracking_uri)
    resolved = registry.resolve(space_uri)
    space = registry.load(f"models:/{resolved.name}/{resolved.version}")
    if space.question_embeddings is None:
        raise DataError("the space keeps no question embeddings: onboarding needs a space trained by this version",
                        file=space_uri)
    start = time.perf_counter()
    work, report = plan_work(space, folder, replace)
    state_file = Path(state) if state else state_path(f"models:/{resolved.name}", resolved.version, folder)
    done = _read_state(state_file)
    todo = [w for w in work if w[0] not in done]
    report.update(space=f"{resolved.name}/{resolved.version}", state=str(state_file), resumed=len(work) - len(todo))
    if todo:
        dirs = directions(space, space.question_embeddings)
        priors = member_priors(space, "", exclude=())  # every known LLM: the same prior for each new one
        dirs_ref, priors_ref = ray.put(dirs), ray.put(priors)
        fit = ray.remote(num_cpus=1)(_fit_chunk)
        pending = [fit.remote(dirs_ref, priors_ref, todo[i:i + chunk]) for i in range(0, len(todo), chunk)]
        state_file.parent.mkdir(parents=True, exist_ok=True)
        with state_file.open("a") as f, tqdm(total=len(work), initial=len(work) - len(todo), unit="LLM",
                                             desc="onboarding", disable=not progress) as bar:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                rows = ray.get(ready[0])
                for row in rows:
                    f.write(json.dumps(row) + "\n")
                    done[row["llm"]] = row
                f.flush()
                bar.update(len(rows))
    wanted = [w[0] for w in work]
    failed = [{"llm": n, "reason": done[n]["error"]} for n in wanted if "error" in done[n]]
    fitted = [n for n in wanted if "error" not in done[n]]
    report["failed"] = failed
    report["onboarded"] = len(fitted)
    report["fit_s"] = round(time.perf_counter() - start, 2)
    report["version"] = None
    if fitted:
        by_name = {w[0]: w for w in work}
        vectors = [np.array([done[n]["vectors"][i] for n in fitted], dtype=np.float32)
                   for i in range(len(space.members))]
        answers = None
        if space.answers is not None:
            rows = np.concatenate([np.full(len(by_name[n][1]), k) for k, n in enumerate(fitted)])
            answers = answer_table(len(fitted), len(space.question_ids), rows,
                                   np.concatenate([by_name[n][1] for n in fitted]),
                                   np.concatenate([by_name[n][2] for n in fitted]))
        new = space.with_models(fitted, vectors, answers)
        onboarded = new.metadata.setdefault("onboarded", {})
        for n in fitted:
            onboarded[n] = {"model": n, "responses": done[n]["responses"], "members": len(space.members),
                            "vector_var": done[n]["vector_var"], "from": str(folder)}
            info = report["llm_info"].get(n)
            if info:
                new.metadata.setdefault("llms", {})[n] = info
        name = register or resolved.name
        version = registry.register(new, name, {"onboard.llms": len(fitted), "onboard.failed": len(failed)})
        report["version"], report["registered_as"] = version, name
        if promote:
            alias = space_uri.split("@", 1)[1] if "@" in space_uri else "champion"
            registry.promote(name, version, alias, expected=int(resolved.version) if name == resolved.name else None)
            report["promoted"] = f"models:/{name}@{alias}"
    report.pop("llm_info")
    report["wall_s"] = round(time.perf_counter() - start, 2)
    report["s_per_llm"] = round(report["wall_s"] / max(1, len(wanted)), 4)
    return report
