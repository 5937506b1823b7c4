"""The package's layers (pyproject.toml, [tool.importlinter]): imports only run down, inside
functions too. `lint-imports` prints the chain of any import that runs up."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(root: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_imports_only_run_down_the_layers():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout


def _copy_with(tmp_path: Path, module: str, code: str) -> Path:
    """A copy of the package and its contracts with `code` added at the end of `module`."""
    import shutil
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "jeirt_ray", copy / "jeirt_ray", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    path = copy / module
    path.write_text(path.read_text() + code)
    return copy


def test_the_layer_check_fails_on_an_import_that_runs_up(tmp_path):
    """The routing layer importing the experiments layer, as it once did, inside a function: the
    check must fail on it."""
    copy = _copy_with(tmp_path, "jeirt_ray/routing/policies.py",
                      "\n\ndef _up():\n    from ..experiments.methods import train_space\n    return train_space\n")
    out = _lint(copy)
    assert out.returncode != 0
    assert "jeirt_ray.routing.policies -> jeirt_ray.experiments.methods" in out.stdout


def test_the_serving_concerns_check_fails_when_one_imports_another(tmp_path):
    """The key guard importing the relay: serving's folders are kept apart, so the check fails."""
    copy = _copy_with(tmp_path, "jeirt_ray/serving/access/guard.py",
                      "\n\ndef _across():\n    from ..relay.gateway import Gateway\n    return Gateway\n")
    out = _lint(copy)
    assert out.returncode != 0
    assert "jeirt_ray.serving.access.guard -> jeirt_ray.serving.relay.gateway" in out.stdout


def _cycles(package: str) -> tuple[int, list[tuple[str, str]]]:
    """(the modules read, the (a, b) where a imports b and b leads back to a), inside functions too
    (grimp: import-linter's graph)."""
    import grimp
    graph = grimp.build_graph(package, cache_dir=None)
    return len(graph.modules), [(a, b) for a in sorted(graph.modules)
                                for b in sorted(graph.find_modules_directly_imported_by(a))
                                if graph.find_shortest_chain(importer=b, imported=a)]


def test_no_module_imports_one_that_imports_it_back():
    modules, cycles = _cycles("jeirt_ray")
    assert modules > 100 and cycles == []


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    """A copy of two modules that import each other (inside a function, as data/ once did)."""
    pkg = tmp_path / "loopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert set(_cycles("loopy")[1]) == {("loopy.a", "loopy.b"), ("loopy.b", "loopy.a")}
