"""The feedback loop end to end through the gateway (benchmarks/gateway_loop.py, a short stream):
mmlu_pro's four recorded LLMs replayed as upstreams, a space that never saw mmlu_pro's history,
history's questions sent as chat requests, each answer graded by the answer key and sent back as
feedback, the Router replica learning from it. Whether learning routes the category better is
measured on the whole streams by the benchmark (docs/results/learning.md); here, what must hold
on any stream: no failed request or feedback, every grade applied by the replica, the served
P(correct) moved the way the grades say, and no query text or admin token written anywhere."""

import json
import subprocess
import sys
from pathlib import Path

from .conftest import shared_dataset

ROOT = Path(__file__).resolve().parents[1]


def test_a_stream_through_the_gateway_is_answered_graded_and_learned_from(tmp_path):
    folder = shared_dataset("mmlu_pro")
    out = tmp_path / "loop.json"
    run = subprocess.run([sys.executable, "benchmarks/gateway_loop.py", "--data", str(folder), "--encoder", "hashing",
                          "--categories", "history", "--max-queries", "120", "--train-questions", "1500",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    [r] = json.loads(out.read_text())["runs"]
    assert r["queries"] == 120 and r["failed"] == 0 and r["feedback_status"] == {"200": 120}, r
    assert r["graded"] == r["applied"] == 120
    assert r["key_agrees_with_label"] >= 0.95  # the key grades the replayed answers as the dataset's labels say
    assert r["query_text_found"] == 0 and r["token_found"] == 0
    # learning moved the served P(correct) of the LLMs the grades say the space misjudged, their way
    answered = {n: share for n, share in r["loop_llm_share"].items() if share >= 0.2}
    moved = [n for n in answered if abs(r["graded_minus_static_p"][n]) >= 0.05]
    assert all((r["served_minus_static_p"][n] > 0) == (r["graded_minus_static_p"][n] > 0) for n in moved), r
    assert max(abs(v) for v in r["served_minus_static_p"].values()) > 1e-3, r  # an LLM without grades: within 1e-7
