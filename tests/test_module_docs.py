"""Every module in playbooks/library documents itself as Ansible expects: ansible-doc parses DOCUMENTATION,
EXAMPLES and RETURN, the documented options are exactly the ones the code declares, and check mode is declared."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .module_specs import LIBRARY, MODULES, argument_spec, load

REPO = Path(__file__).resolve().parent.parent  # the checkout these tests run from

pytestmark = pytest.mark.integration

ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PAGER="cat", ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [ANSIBLE_DOC, "-M", str(LIBRARY), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    proc = ansible_doc("--json", *MODULES)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_library_has_the_modules_the_playbooks_use() -> None:
    assert {"spark_bench", "spark_facts", "spark_image", "spark_inspect", "spark_server"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_documented_options_are_the_options_the_code_declares(docs: dict[str, Any], name: str) -> None:
    documented = docs[name]["doc"]["options"]
    declared = argument_spec(name)
    assert set(documented) == set(declared)
    for option, spec in declared.items():
        doc = documented[option]
        assert doc.get("description"), f"{name}.{option} has no description"
        assert doc.get("type", "str") == spec.get("type", "str"), f"{name}.{option}: type"
        assert bool(doc.get("required")) == bool(spec.get("required")), f"{name}.{option}: required"
        assert doc.get("default") == spec.get("default"), f"{name}.{option}: default"
        assert doc.get("choices") == spec.get("choices"), f"{name}.{option}: choices"
        assert doc.get("aliases") == spec.get("aliases"), f"{name}.{option}: aliases"
        assert doc.get("elements") == spec.get("elements"), f"{name}.{option}: elements"


@pytest.mark.parametrize("name", MODULES)
def test_return_values_are_documented(docs: dict[str, Any], name: str) -> None:
    returned = docs[name]["return"]
    assert returned and all(v.get("description") and v.get("returned") for v in returned.values())


@pytest.mark.parametrize("name", MODULES)
def test_examples_use_only_documented_options_and_all_required_ones(docs: dict[str, Any], name: str) -> None:
    examples = yaml.safe_load(docs[name]["examples"])
    calls = [task[name] for task in examples if name in task]
    assert calls, f"{name}: EXAMPLES must show the module"
    options = docs[name]["doc"]["options"]
    aliases = {alias for o in options.values() for alias in o.get("aliases", [])}
    required = {k for k, o in options.items() if o.get("required")}
    for args in calls:
        assert set(args) <= set(options) | aliases
        assert required <= set(args)


@pytest.mark.parametrize("name", MODULES)
def test_check_mode_is_declared_in_the_docs_and_the_code(docs: dict[str, Any], name: str) -> None:
    assert docs[name]["doc"]["attributes"]["check_mode"]["support"] in ("full", "partial")
    tree = ast.parse((LIBRARY / f"{name}.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "AnsibleModule"]
    assert len(calls) == 1
    flags = {k.arg: k.value for k in calls[0].keywords}
    assert isinstance(flags.get("supports_check_mode"), ast.Constant) and flags["supports_check_mode"].value is True
    assert isinstance(flags.get("argument_spec"), ast.Name) and flags["argument_spec"].id == "ARGUMENT_SPEC"
    assert load(name).ARGUMENT_SPEC is argument_spec(name)


def test_ansible_doc_renders_every_module_as_text() -> None:
    proc = ansible_doc(*MODULES)
    assert proc.returncode == 0, proc.stderr
    for name in MODULES:
        assert name.upper() in proc.stdout or name in proc.stdout
        for option in argument_spec(name):
            assert option in proc.stdout, f"{name}: {option} missing from ansible-doc's text"
