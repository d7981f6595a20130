"""The test machine plays two parts that never share a CPU on a real fleet: the controller (pytest, the CLI and its
ansible-playbook runs: CPU-hungry, and no timing rests on them) and the hosts (sshd, dockerd and what they start: the
simulator and the load driver, whose timings the tests compare). The controller side runs at a lower CPU priority
(`lower_controller`, in every test process), the hosts' daemons at the normal one (`host_priority`, as their
preexec_fn), so a busy controller does not bend a measurement. Without root a process cannot raise its priority
again: then everything stays at the controller's, as before."""

from __future__ import annotations

import os

CONTROLLER_NICE = 10  # CFS weights: a nice-0 task gets ~10x the CPU of a nice-10 one when both want it


def lower_controller() -> None:
    if os.geteuid() == 0 and os.nice(0) < CONTROLLER_NICE:  # without root the hosts could not be raised back
        os.nice(CONTROLLER_NICE - os.nice(0))


def host_priority() -> None:
    """preexec_fn of a host's daemon: back to the normal priority (root only; a no-op otherwise)."""
    current = os.nice(0)
    if current > 0 and os.geteuid() == 0:
        os.nice(-current)
