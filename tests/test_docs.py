"""The documentation: its Python examples run, the site builds with --strict, and the committed
HTTP contract is the one the service declares. Examples fenced ```python run here; those that
need something a test cannot have (a running service, a GPU) are fenced ```py."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
EXAMPLES = [(page, i, code) for page in PAGES for i, code in enumerate(BLOCK.findall(page.read_text()))]


@pytest.mark.slow
@pytest.mark.parametrize("page, index, code", EXAMPLES,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in EXAMPLES])
def test_python_examples_run(page, index, code, tmp_path):
    """Each example in a fresh process, working directory and JEIRT_HOME, as a reader would."""
    env = {**os.environ, "JEIRT_HOME": str(tmp_path / "home"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"{page.name} example {index} failed:\n{run.stderr[-3000:]}"
    if (page.name, index) == ("README.md", 0):  # the space it registers is what the shipped config serves
        check = ("from jeirt_ray.serving.deployment.deploy import check_registry, load_config; "
                 f"c = load_config({str(ROOT / 'deployments' / 'local.yaml')!r}); check_registry(c); "
                 "print(c.applications[0].args['encoder'])")
        served = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=300)
        assert served.returncode == 0 and served.stdout.split() == ["hashing-384"], served.stderr[-3000:]


def test_examples_exist():
    assert len(EXAMPLES) >= 3  # README and getting started: a test that finds none would pass vacuously


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "jeirt train" in cli and "--split" in cli  # generated from the Typer app
    api = (tmp_path / "site" / "reference" / "python" / "index.html").read_text()
    assert "jeirt_ray.api.space.Space.route" in api and "P(correct) of every LLM" in api  # from the docstrings


def test_committed_openapi_is_the_declared_one():
    """docs/openapi.json must be regenerated when the API changes:
    python -c "import json; from jeirt_ray.serving.app import api; print(json.dumps(api.openapi(), indent=1, sort_keys=True))" > docs/openapi.json"""
    from jeirt_ray.serving.app import api
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert api.openapi() == committed, "the declared schema differs from docs/openapi.json: regenerate it " \
                                       "(see this test's docstring)"
