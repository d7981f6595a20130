"""`spark-agent pin`: editing the spec safely (the end-to-end run on a real dockerd: test_pin_docker.py)."""

from __future__ import annotations

import tomllib

import pytest

from agent.commands.pin import write_image_ref
from agent.errors import UserError

pytestmark = pytest.mark.unit

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
