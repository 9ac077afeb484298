"""Operations files parse and pass their own tools' checks where those tools exist."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_prometheus_config_and_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    for args in (["check", "config", "infra/prometheus/prometheus.yml"],
                 ["check", "rules", "infra/prometheus/alerts.yml"]):
        res = subprocess.run([promtool, *args], cwd=ROOT, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stdout + res.stderr


def test_docker_compose_file_is_accepted() -> None:
    docker = shutil.which("docker")
    has_plugin = docker is not None and subprocess.run(
        [docker, "compose", "version"], capture_output=True, check=False).returncode == 0
    if has_plugin:
        cmd = [docker, "compose", "config", "-q"]
    elif shutil.which("docker-compose"):
        cmd = ["docker-compose", "config", "-q"]
    else:
        pytest.skip("neither 'docker compose' nor 'docker-compose' is installed")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    text = (ROOT / "docker-compose.yml").read_text()
    for service in ("kafka:", "prometheus:", "grafana:", "worker:", "collector:"):
        assert service in text
