"""Ends ansible-playbook when the spark-agent controller that started it dies (SIGKILL included).

spark-agent sets SPARK_AGENT_CONTROLLER_PID and enables this callback; a plain `ansible-playbook` run does not, and
then it does nothing. Without it, a playbook outlives a killed controller (ansible-runner starts it in a session of its
own) and goes on starting servers and fetching results that no one reads. Its forked workers finish the task at
hand and exit: a server that task started is a stale holder the next run reclaims (see running/sweep.py).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: spark_parent_guard
type: aggregate
short_description: stop ansible-playbook when the spark-agent controller that started it dies
description:
  - When C(SPARK_AGENT_CONTROLLER_PID) names this process's parent, asks Linux to send SIGKILL to this process when
    that parent dies (prctl PR_SET_PDEATHSIG). If the parent is already gone, exits at once.
  - Does nothing in any other case (a plain ansible-playbook run, another OS).
requirements:
  - Linux, for prctl; elsewhere the callback is a no-op.
"""

import ctypes
import os
import signal
import sys

from ansible.plugins.callback import CallbackBase

PR_SET_PDEATHSIG = 1


def guard_parent(expected_pid: str | None) -> str:
    """What the guard did: 'off', 'armed', 'parent gone' or 'unsupported'."""
    if not expected_pid or not expected_pid.isdigit():
        return "off"
    if not sys.platform.startswith("linux"):
        return "unsupported"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return "unsupported"
    # the parent may have died between our start and the prctl: then no signal would ever come
    return "armed" if os.getppid() == int(expected_pid) else "parent gone"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "spark_parent_guard"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        if guard_parent(os.environ.get("SPARK_AGENT_CONTROLLER_PID")) == "parent gone":
            os._exit(143)
