"""The one base class of every error the host side raises on purpose. Standard library only.

An Ansible module catches HostError and fails the task with its message; anything else is a bug and keeps its
traceback. Subclasses keep their older bases too (ValueError, RuntimeError) so existing callers still catch them.
"""

from __future__ import annotations


class HostError(Exception):
    """Something on the host stops the work; the message says what, and what to do about it."""
