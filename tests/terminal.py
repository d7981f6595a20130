"""Starting the CLI in a test the way a terminal starts a foreground job."""

from __future__ import annotations

import signal


def ctrl_c_as_on_a_terminal() -> None:
    """preexec_fn for a CLI that a test stops with SIGINT. A job started in the background by a shell inherits SIGINT
    ignored (POSIX), and so does every process it starts, pytest and its children included; a terminal's foreground
    job does not. Python turns SIGINT into KeyboardInterrupt only when it starts with the default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
