"""Errors a user can fix. Everything else is a bug and gets a traceback under --debug."""

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """`text` as one printable line: newlines, tabs, NUL and escapes shown as \\n, \\t, \\x00, \\x1b."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class UserError(Exception):
    """A problem in the user's input or environment: one clear line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
