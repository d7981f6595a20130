"""Errors a user can fix. Everything else is a bug and gets a traceback under --debug."""


class UserError(Exception):
    """A problem in the user's input or environment: one clear line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
