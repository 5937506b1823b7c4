"""Shared bits of the benchmark scripts: argument defaults and the real-data check."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def parser(doc: str, data: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: --data (unless data=False), --out, --encoder, --split-seed."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if data:
        ap.add_argument("--data", help="dataset folder (default ../shared/data/mmlu_pro)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2")
    ap.add_argument("--split-seed", type=int, default=0)
    return ap


def dataset_path(data: str | None, default: str) -> Path:
    path = Path(data) if data else SHARED / default
    if not path.exists():
        sys.exit(f"dataset not found at {path.resolve()}: pass --data DIR")
    return path


def write_json(out: str, payload: dict, quiet: bool = False) -> None:
    payload = {**payload, "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                      "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()}}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(payload, indent=1))
    if not quiet:
        print(json.dumps(payload, indent=1))
