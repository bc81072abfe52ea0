"""Structural checks of compose/docker-compose.yml (no Docker needed) and of the local services launcher."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
LAUNCHER = ROOT / "compose" / "local" / "services"

STORES = ("kafka", "elasticsearch", "redis", "qdrant")
APPS = ("worker", "serve")

# "[ip:]host[-range]:container[-range][/proto]" or a bare container port
PORT_RE = re.compile(
    r"^(?:(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):)?"
    r"(?:(\d{1,5})(?:-(\d{1,5}))?:)?"
    r"(\d{1,5})(?:-(\d{1,5}))?"
    r"(?:/(?:tcp|udp|sctp))?$"
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "compose file must be a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svcs = compose.get("services")
    assert isinstance(svcs, dict) and svcs, "no services"
    return svcs


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) for item in env)
        return {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def test_expected_services_present(services: dict[str, dict[str, Any]]) -> None:
    for name in (*STORES, *APPS):
        assert name in services, f"service {name} missing"


def test_every_service_has_image_or_build(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), f"{name} has neither image nor build"


def test_build_points_at_the_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    for name in APPS:
        build = services[name]["build"]
        context = COMPOSE.parent / (build if isinstance(build, str) else build.get("context", "."))
        dockerfile = context / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")
        assert (context / "pyproject.toml").is_file(), f"{name}: build context {context} is not the project root"
        assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
        text = dockerfile.read_text()
        assert "FROM python:3.11-slim" in text and "pip install" in text and "[cluster]" in text


def test_stores_have_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    for name in STORES:
        check = services[name].get("healthcheck")
        assert isinstance(check, dict), f"{name} has no healthcheck"
        test = check.get("test")
        assert test, f"{name} healthcheck has no test"
        if isinstance(test, list):
            assert test[0] in ("CMD", "CMD-SHELL"), f"{name}: healthcheck test must start with CMD or CMD-SHELL"
            assert len(test) > 1


def test_depends_on_targets_exist_and_wait_for_health(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        targets = deps if isinstance(deps, list) else list(deps)
        for target in targets:
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            if isinstance(deps, dict):
                condition = deps[target].get("condition")
                if condition == "service_healthy":
                    assert services[target].get("healthcheck"), f"{name} waits for {target} health, which has no check"
    for name in APPS:
        deps = services[name].get("depends_on")
        assert isinstance(deps, dict)
        for store in STORES:
            assert deps.get(store, {}).get("condition") == "service_healthy", f"{name} must wait for {store} healthy"


def test_named_volumes_declared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    declared = compose.get("volumes") or {}
    used = set()
    for name, svc in services.items():
        for vol in svc.get("volumes") or []:
            source = vol.get("source") if isinstance(vol, dict) else vol.split(":", 1)[0]
            kind = vol.get("type", "volume") if isinstance(vol, dict) else None
            if not source or source.startswith((".", "/", "~", "$")) or kind == "bind":
                continue  # bind mount
            assert isinstance(vol, dict) or ":" in vol, f"{name}: volume {vol} has no target"
            used.add(source)
            assert source in declared, f"{name} uses volume {source} that is not declared at top level"
    for store in STORES:
        assert services[store].get("volumes"), f"{store} keeps no data in a volume"
    assert used, "no named volumes used"


def test_ports_are_valid(services: dict[str, dict[str, Any]]) -> None:
    seen_host_ports: set[tuple[str, int]] = set()
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            assert isinstance(port, str), f"{name}: write port {port!r} as a quoted string (YAML base-60 trap)"
            m = PORT_RE.match(port)
            assert m, f"{name}: invalid port mapping {port!r}"
            numbers = [int(g) for g in m.groups() if g]
            assert all(0 < n < 65536 for n in numbers), f"{name}: port out of range in {port!r}"
            if m.group(1):
                ip = port.rsplit(":", 2)[0] if port.count(":") == 2 else "0.0.0.0"
                key = (ip, int(m.group(1)))
                assert key not in seen_host_ports, f"host port {key} published twice"
                seen_host_ports.add(key)
    assert ("0.0.0.0", 8080) in seen_host_ports, "serve should publish 8080"


def test_app_environment(services: dict[str, dict[str, Any]]) -> None:
    for name in APPS:
        env = env_of(services[name])
        assert env.get("RAGSYNC_PROFILE") == "cluster", f"{name}: RAGSYNC_PROFILE must be cluster"
        assert env.get("RAGSYNC_KAFKA_BOOTSTRAP") == "kafka:9092"
        assert env.get("RAGSYNC_ES_URL") == "http://elasticsearch:9200"
        assert env.get("RAGSYNC_QDRANT_URL") == "http://qdrant:6333"
        assert env.get("RAGSYNC_REDIS_URL") == "redis://redis:6379/0"
        assert "RAGSYNC_SESSION_SECRET" in env and "${RAGSYNC_SESSION_SECRET" in env["RAGSYNC_SESSION_SECRET"]
        assert "ANTHROPIC_API_KEY" in env and "${ANTHROPIC_API_KEY" in env["ANTHROPIC_API_KEY"]


def test_app_commands(services: dict[str, dict[str, Any]]) -> None:
    def words(cmd: Any) -> list[str]:
        return cmd if isinstance(cmd, list) else str(cmd).split()

    assert words(services["worker"]["command"])[-1] == "worker"
    serve = words(services["serve"]["command"])
    assert "serve" in serve and "0.0.0.0" in serve and "8080" in serve


def test_kafka_is_single_node_kraft(services: dict[str, dict[str, Any]]) -> None:
    env = env_of(services["kafka"])
    assert "broker" in env["KAFKA_PROCESS_ROLES"] and "controller" in env["KAFKA_PROCESS_ROLES"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_ADVERTISED_LISTENERS"].endswith("kafka:9092")


def test_elasticsearch_single_node(services: dict[str, dict[str, Any]]) -> None:
    es = services["elasticsearch"]
    assert re.search(r":8\.19\.\d+$", es["image"]), "elasticsearch image must match the pinned 8.x client"
    env = env_of(es)
    assert env.get("discovery.type") == "single-node"


def test_launcher_help_runs_with_stdlib_only() -> None:
    assert LAUNCHER.is_file() and LAUNCHER.stat().st_mode & 0o111, "compose/local/services must be executable"
    assert LAUNCHER.read_text().startswith("#!/usr/bin/env python3\n")
    out = subprocess.run(
        [sys.executable, "-S", "-I", str(LAUNCHER), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "up|down|status" in out.stdout
    bad = subprocess.run(
        [sys.executable, str(LAUNCHER), "up", "nosuchservice"], capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 2


def test_qdrant_image_is_the_tested_server_version(services: dict[str, dict[str, Any]]) -> None:
    launcher = load_launcher()
    assert services["qdrant"]["image"] == f"qdrant/qdrant:v{launcher.QDRANT_VERSION}"
    assert launcher.QDRANT_VERSION == "1.18.3"


def load_launcher() -> Any:
    """compose/local/services as a module (it has no .py suffix), to test its functions directly."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("ragsync_local_services", str(LAUNCHER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_launcher_finds_the_qdrant_binary_beside_or_above_the_checkout(tmp_path: Path) -> None:
    launcher = load_launcher()
    checkout = tmp_path / "ci" / "clones" / "ragsync"
    checkout.mkdir(parents=True)
    binary = tmp_path / "ci" / "shared" / "tools" / "qdrant" / "qdrant"  # an ancestor's shared/, as on CI
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    env = {"PATH": str(tmp_path / "empty")}
    assert launcher.find_qdrant(checkout, env) == binary
    beside = checkout.parent / "shared" / "tools" / "qdrant" / "qdrant"
    beside.parent.mkdir(parents=True)
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o755)
    assert launcher.find_qdrant(checkout, env) == beside, "../shared beside the checkout comes first"
    explicit = tmp_path / "my-qdrant"
    explicit.write_text("#!/bin/sh\n")
    explicit.chmod(0o755)
    assert launcher.find_qdrant(checkout, {**env, "RAGSYNC_QDRANT_BIN": str(explicit)}) == explicit


def test_launcher_says_how_to_get_qdrant_when_there_is_none(tmp_path: Path) -> None:
    launcher = load_launcher()
    checkout = tmp_path / "clone"
    checkout.mkdir()
    nowhere = tmp_path / "no-shared"
    env = {"PATH": str(tmp_path)}
    with pytest.raises(launcher.ServiceError) as err:
        launcher.find_qdrant(checkout, env, nowhere)
    message = str(err.value)
    assert "\n" not in message and "RAGSYNC_QDRANT_BIN" in message and "qdrant/qdrant:v1.18.3" in message
    with pytest.raises(launcher.ServiceError, match="not an executable file"):
        launcher.find_qdrant(checkout, {**env, "RAGSYNC_QDRANT_BIN": str(tmp_path / "missing")}, nowhere)
