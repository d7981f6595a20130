"""Who this controller is: the holder record a host keeps with its lock, shown to anyone it refuses."""

from __future__ import annotations

import os
import socket

from agent.hostside import utc


def controller_identity(sweep: str, cell_id: str) -> dict:
    """Who holds the lock: recorded on the host, shown to anyone refused."""
    return {
        "user": os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid()),
        "controller_host": socket.gethostname(),
        "controller_pid": os.getpid(),
        "since": utc.iso(),
        "sweep": sweep,
        "cell_id": cell_id,
    }
