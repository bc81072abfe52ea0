"""The layering rules of the project brief, checked by reading the source (ast), not by running it.

    ragsync > (connectors | streams | query) > indexer > schemas

A module imports only its own package or the layers below it (imports inside functions and under
TYPE_CHECKING count: they run too); the three middle packages never import each other. Only ragsync/
reads settings: no module below it reads the environment or names a RAGSYNC_* variable, so an adapter
takes plain arguments and a test or a benchmark can build one without a settings file. Optional
capabilities are declared on the ports, never probed with hasattr or getattr(x, "name", default).
`lint-imports` (scripts/test.sh) checks the same layers from pyproject.toml; this one runs with the
tests, and adds the other two rules.
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

GETATTR_ALLOWED = {
    ("indexer/embedder.py", "model"): "fastembed's internal model object (as HASATTR_ALLOWED)",
    ("indexer/embedder.py", "additional_files"): "fastembed's model description, which not every version has",
    ("connectors/drive.py", "O_NOFOLLOW"): "a platform's os module, not a port",
    ("connectors/drive.py", "O_NONBLOCK"): "a platform's os module, not a port",
    ("connectors/drive.py", "O_CLOEXEC"): "a platform's os module, not a port",
    ("connectors/front_matter.py", "problem_mark"): "PyYAML's errors: only the marked ones carry it",
    ("connectors/front_matter.py", "problem"): "PyYAML's errors: only the marked ones carry it",
    ("connectors/smb_rpc.py", "get_packet"): "impacket's DCE/RPC errors: only a session error carries a reply",
    ("streams/kafka_producer.py", "_sender"): "kafka-python's producer internals, to stop its sender thread",
    ("ragsync/request_log.py", "path"): "Starlette's BaseRoute declares no path (Route and Mount do)",
    ("ragsync/console/docs.py", "path"): "Starlette's BaseRoute declares no path (Route and Mount do)",
}
"""getattr(x, "name", default) with a literal name is a probe as hasattr is; these read third-party objects."""


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


def _getattr_probe(node: ast.AST) -> str | None:
    """The attribute name of `getattr(x, "name", default)`: a probe for an attribute that may be missing."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
        return None
    if len(node.args) != 3 or node.keywords:
        return None
    attr = node.args[1]
    return attr.value if isinstance(attr, ast.Constant) and isinstance(attr.value, str) else None


def probe_violations(root: Path) -> list[str]:
    out: list[str] = []
    for _, path, tree in modules(root):
        name = str(path.relative_to(root))
        for node in ast.walk(tree):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
            if call and name not in HASATTR_ALLOWED:
                out.append(f"{name}:{node.lineno} probes with hasattr (declare the capability on the port)")
            attr = _getattr_probe(node)
            if attr is not None and (name, attr) not in GETATTR_ALLOWED:
                out.append(f"{name}:{node.lineno} probes {attr} with getattr (declare the capability on the port)")
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
        "def probe(index, name):\n"
        "    return getattr(index, 'cache', None), getattr(index, name, None), getattr(index, 'name')\n"
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
    assert probe_violations(tmp_path) == [
        "indexer/bad.py:6 probes with hasattr (declare the capability on the port)",
        "indexer/bad.py:8 probes cache with getattr (declare the capability on the port)",
    ]
