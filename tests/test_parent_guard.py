"""A playbook dies with the controller that started it: SIGKILL the controller and no later task runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent  # the checkout these tests run from

pytestmark = pytest.mark.integration

CONTROLLER = textwrap.dedent("""
    import sys
    from agent.running.playbooks import run_playbook
    run_playbook(sys.argv[1], sys.argv[2])
""")


def _playbooks_under(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if _is_playbook(c)]


def _is_playbook(proc: psutil.Process) -> bool:
    try:
        return any("ansible-playbook" in part for part in proc.cmdline()[:3])
    except (psutil.Error, OSError):  # it ended while we looked
        return False


def test_sigkilled_controller_leaves_no_playbook(tmp_path):
    marker, after = tmp_path / "started", tmp_path / "went-on"
    playbook = tmp_path / "slow.yml"
    playbook.write_text(
        textwrap.dedent(f"""
        - name: Slow
          hosts: localhost
          gather_facts: false
          tasks:
            - name: Say we started
              ansible.builtin.file:
                path: {marker}
                state: touch
                mode: "0600"
            - name: Wait long
              ansible.builtin.command: sleep 120
              changed_when: false
    """)
    )
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(playbook), str(inventory)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "the playbook never started"
            assert controller.poll() is None, "the controller exited early"
            time.sleep(0.2)
        main = [p for p in _playbooks_under(controller.pid) if p.ppid() == controller.pid]
        assert main, "no ansible-playbook under the controller"
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=10)
        _gone, alive = psutil.wait_procs(main, timeout=10)
        assert alive == [], f"ansible-playbook outlived its controller: {[p.pid for p in alive]}"
        time.sleep(6)  # the running task (sleep 3) ends in its worker; the next task must never start
        assert not after.exists()
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for proc in _playbooks_under(controller.pid):
            proc.kill()


def test_guard_is_off_for_plain_ansible_runs():
    """In a child process: the guard arms PR_SET_PDEATHSIG in whatever process calls it (never in pytest itself), and
    whether pytest's own parent is init depends on how it was started."""
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); import spark_parent_guard as g; "
        "print(g.guard_parent(None), g.guard_parent('not-a-pid'), g.guard_parent(str(os.getpid())), "
        "g.guard_parent(str(os.getppid())), sep=',')"
    )
    plugins = str(REPO / "playbooks" / "callback_plugins")
    out = subprocess.run([sys.executable, "-c", code, plugins], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "off,off,parent gone,armed"  # no pid, not a pid, a pid that is not the parent, the parent


def test_ansible_doc_shows_the_callback():
    env = {**os.environ, "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "playbooks" / "callback_plugins")}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "callback", "--json", "spark_parent_guard"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    doc = json.loads(out)["spark_parent_guard"]["doc"]
    assert doc["name"] == "spark_parent_guard" and "PR_SET_PDEATHSIG" in " ".join(doc["description"])
