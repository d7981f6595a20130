"""Errors a user can fix. Everything else is a bug and gets a traceback under --debug."""

from agent.hostside import redact


class UserError(Exception):
    """A problem in the user's input or environment: one clear line, exit code 2. Never shows a secret."""

    exit_code = 2

    def __init__(self, message: str):
        message = redact.redact_text(message)
        super().__init__(message)
        self.message = message
