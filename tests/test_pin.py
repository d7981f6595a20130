"""`spark-agent pin`: a tag resolved on a host through Ansible, printed or written into the spec."""

from __future__ import annotations

import tomllib

import pytest

from agent.cli import main
from agent.commands.pin import write_image_ref
from agent.errors import UserError
from agent.hostside import docker as sdocker

pytest_plugins = ["tests.fixtures_docker"]  # dockerd, sim_image: one of each per session

PINNED = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32

SPEC = """\
# my sweep
[sweep]
name = "quick"

[image]   # the container
ref = "nvcr.io/nvidia/vllm:25.09-py3"   # a tag, to be pinned
vllm_version = "0.24.0"

[matrix]
moe_backend = ["marlin"]
"""


def test_write_replaces_the_ref_and_keeps_everything_else(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    write_image_ref(spec, PINNED)
    text = spec.read_text()
    assert text == SPEC.replace('"nvcr.io/nvidia/vllm:25.09-py3"', f'"{PINNED}"')
    assert tomllib.loads(text)["image"] == {"ref": PINNED, "vllm_version": "0.24.0"}


def test_write_adds_a_missing_ref_or_image_table(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('[image]\nvllm_version = "0.24.0"\n\n[sweep]\nname = "q"\n')
    write_image_ref(spec, PINNED)
    assert tomllib.loads(spec.read_text())["image"]["ref"] == PINNED
    spec.write_text('[sweep]\nname = "q"')
    write_image_ref(spec, PINNED)
    assert tomllib.loads(spec.read_text()) == {"sweep": {"name": "q"}, "image": {"ref": PINNED}}


def test_write_refuses_what_it_cannot_edit_safely(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('image = { ref = "x:1" }\n')  # an inline table, not an [image] section
    before = spec.read_text()
    with pytest.raises(UserError, match=r"spec\.toml"):
        write_image_ref(spec, PINNED)
    assert spec.read_text() == before
    with pytest.raises(UserError, match="cannot read the spec"):
        write_image_ref(tmp_path / "missing.toml", PINNED)


@pytest.mark.docker
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
    assert "no such host" in _error_line(capsys.readouterr().err, "--host spark-9")  # before any host is touched


def _error_line(stderr: str, start: str) -> str:
    """The CLI's one error line (structured progress logs may share stderr)."""
    lines = [line for line in stderr.splitlines() if line.startswith("spark-agent: error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"spark-agent: error: {start}"), stderr
    return lines[0]
