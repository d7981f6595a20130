"""Errors a user can fix. Everything else is a bug and gets a traceback under --debug."""

from agent.hostside import redact


class UserError(Exception):
    """A problem in the user's input or environment: one clear line, exit code 2. Never shows a secret."""

    exit_code = 2

    def __init__(self, message: str):
        message = redact.redact_text(message)
        super().__init__(message)
        self.message = message


def missing_extra(extra: str, feature: str) -> UserError:
    """A feature whose optional dependencies are not installed: which extra to install, in one line (exit 2)."""
    return UserError(f"{feature} needs the [{extra}] extra: pip install 'spark-agent[{extra}]'")
