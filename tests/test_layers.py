"""The layering rules of the project brief, checked by reading the source (ast), not by running it.

    ragsync > (connectors | streams | query) > indexer > schemas

A module imports only its own package or the layers below it (imports inside functions and under
TYPE_CHECKING count: they run too); the three middle packages never import each other. Only ragsync/
reads settings: no module below it reads the environment or names a RAGSYNC_* variable, so an adapter
takes plain arguments and a test or a benchmark can build one without a settings file. Optional
capabilities are declared on the ports, never probed with hasattr. `lint-imports` (scripts/test.sh)
checks the same layers from pyproject.toml; this one runs with the tests, and adds the other two rules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYER = {"ragsync": 3, "connectors": 2, "streams": 2, "query": 2, "indexer": 1, "schemas": 0}

HASATTR_ALLOWED = {
    "streams/appliers.py": "os.setpriority: a platform's os module, not a port",
    "indexer/embedder.py": "fastembed's internal model object, pinned by fastembed<0.10 and checked at load",
}


def modules(root: Path) -> Iterator[tuple[str, Path, ast.Module]]:
    for package in LAYER:
        for path in sorted((root / package).rglob("*.py")):
            yield package, path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every absolute import, wherever it stands in the module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def layer_violations(root: Path) -> list[str]:
    out: list[str] = []
    for package, path, tree in modules(root):
        for line, target in imports(tree):
            if target in LAYER and target != package and LAYER[target] >= LAYER[package]:
                where = "beside" if LAYER[target] == LAYER[package] else "above"
                out.append(f"{path.relative_to(root)}:{line} imports {target} ({where} {package})")
    return out


def _reads_environment(node: ast.AST) -> bool:
    """os.getenv(...), os.environ.get(...), os.environ[...] read: a copy handed to a child process is not."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        func = node.func
        if func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
            return True
        if func.attr == "get" and isinstance(func.value, ast.Attribute) and func.value.attr == "environ":
            return True
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "environ"
    )


def settings_violations(root: Path) -> list[str]:
    out: list[str] = []
    for package, path, tree in modules(root):
        if package == "ragsync":
            continue
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            if _reads_environment(node):
                out.append(f"{path.relative_to(root)}:{line} reads the environment (only ragsync/ reads settings)")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("RAGSYNC_"):
                out.append(f"{path.relative_to(root)}:{line} names {node.value} (only ragsync/ reads settings)")
    return out


def probe_violations(root: Path) -> list[str]:
    out: list[str] = []
    for _, path, tree in modules(root):
        name = str(path.relative_to(root))
        for node in ast.walk(tree):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
            if call and name not in HASATTR_ALLOWED:
                out.append(f"{name}:{node.lineno} probes with hasattr (declare the capability on the port)")
    return out


def test_every_import_points_down_the_layers() -> None:
    assert layer_violations(ROOT) == []


def test_only_ragsync_reads_settings() -> None:
    assert settings_violations(ROOT) == []


def test_capabilities_are_declared_not_probed() -> None:
    assert probe_violations(ROOT) == []


def test_the_checks_catch_a_wrong_import_a_settings_read_and_a_probe(tmp_path: Path) -> None:
    """Each check fails on a tree that breaks its rule, so the three above could fail."""
    for package in LAYER:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "indexer" / "bad.py").write_text(
        "from schemas.passages import Passage\n"
        "from query.retrieval import Retriever\n"
        "def later():\n"
        "    import ragsync.settings\n"
        "    import os\n"
        "    return os.environ.get('RAGSYNC_HOME'), hasattr(later, 'x')\n"
    )
    (tmp_path / "connectors" / "sibling.py").write_text("import streams.ports\nimport indexer.ports\n")
    assert layer_violations(tmp_path) == [
        "connectors/sibling.py:1 imports streams (beside connectors)",
        "indexer/bad.py:2 imports query (above indexer)",
        "indexer/bad.py:4 imports ragsync (above indexer)",
    ]
    assert settings_violations(tmp_path) == [
        "indexer/bad.py:6 reads the environment (only ragsync/ reads settings)",
        "indexer/bad.py:6 names RAGSYNC_HOME (only ragsync/ reads settings)",
    ]
    assert probe_violations(tmp_path) == ["indexer/bad.py:6 probes with hasattr (declare the capability on the port)"]
