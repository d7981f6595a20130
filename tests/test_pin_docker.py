"""`spark-agent pin` end to end: a tag resolved on a host (a real dockerd) through Ansible, written into the spec."""

from __future__ import annotations

import tomllib

import pytest

from agent.cli import main
from agent.hostside import docker as sdocker
from tests.test_pin import SPEC

pytest_plugins = ["tests.fixtures_docker"]  # dockerd, sim_image: one of each per session
pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_pin_resolves_a_tag_on_the_host_and_writes_the_spec(dockerd, sim_image, tmp_path, capsys):
    name = sdocker.parse_ref(sim_image)[0]
    inventory = str(dockerd.inventory(tmp_path / "inventory.yml"))
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)

    assert main(["pin", f"{name}:test", "--host", "spark-local", "-i", inventory, "--write", str(spec)]) == 0
    assert tomllib.loads(spec.read_text())["image"]["ref"] == sim_image
    assert sim_image in capsys.readouterr().out

    assert main(["pin", f"{name}:no-such-tag", "--host", "spark-local", "-i", inventory]) == 2
    assert "not found" in _error_line(capsys.readouterr().err, "spark-local: cannot resolve")
    assert main(["pin", f"{name}:test", "--host", "spark-9", "-i", inventory]) == 2
    assert "is spark-9 in" in _error_line(capsys.readouterr().err, "host spark-9")


def _error_line(stderr: str, start: str) -> str:
    """The CLI's one error line (structured progress logs may share stderr)."""
    lines = [line for line in stderr.splitlines() if line.startswith("spark-agent: error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"spark-agent: error: {start}"), stderr
    return lines[0]
