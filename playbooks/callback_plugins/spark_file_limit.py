"""Bounds every file ansible-playbook (and its workers, and the scp/sftp it runs) writes on the controller.

A host's sealed tar comes back through ansible.builtin.fetch, which copies whatever the host serves: a huge file, or
a name the host swaps for /dev/zero between the controller's look and the copy, would fill the controller's disk
before running/archive.py could refuse it. spark-agent sets SPARK_AGENT_MAX_FILE_BYTES (the archive limit plus a
margin) and enables this callback, which sets RLIMIT_FSIZE on this process before any worker is forked: a write past
the limit fails (EFBIG in Python, SIGXFSZ in scp/sftp), so the fetch fails and nothing larger lands.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: spark_file_limit
type: aggregate
short_description: bound the size of every file this ansible-playbook writes
description:
  - When C(SPARK_AGENT_MAX_FILE_BYTES) is set, lowers this process's RLIMIT_FSIZE to it (inherited by every worker
    and every program they run), so no fetched file can grow past it.
  - Does nothing in any other case (a plain ansible-playbook run).
"""

import os
import resource

from ansible.plugins.callback import CallbackBase


def limit_files(value: str | None) -> int:
    """The limit set (bytes), or 0 when none was asked for."""
    if not value or not value.isdigit() or int(value) <= 0:
        return 0
    wanted = int(value)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (wanted, hard))
    return wanted


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "spark_file_limit"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        limit_files(os.environ.get("SPARK_AGENT_MAX_FILE_BYTES"))
