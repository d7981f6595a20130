"""The controller's view of the spark role's defaults is the role's file itself: a default changed there is changed
for the inventory's checks, the multi-node plan and the server-log reader too."""

from __future__ import annotations

import pytest
import yaml

from agent.planning import roledefaults
from agent.planning.roledefaults import DEFAULTS_FILE, default_int, default_str

pytestmark = pytest.mark.unit


def test_the_values_are_the_role_files():
    role = yaml.safe_load(DEFAULTS_FILE.read_text())
    assert default_int("spark_ray_port") == role["spark_ray_port"]
    assert default_int("spark_ray_port_base") == role["spark_ray_port_base"]
    assert default_str("spark_workdir") == role["spark_workdir"]


def test_a_template_or_a_wrong_type_is_our_bug_said_with_the_file(monkeypatch):
    monkeypatch.setattr(roledefaults, "_defaults", lambda: {"a": "{{ x }}", "b": True, "c": "7"})
    with pytest.raises(ValueError, match="not a plain string"):
        default_str("a")
    with pytest.raises(ValueError, match="not an integer"):
        default_int("b")
    with pytest.raises(ValueError, match=r"main\.yml: c is '7', not an integer"):
        default_int("c")
