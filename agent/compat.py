"""What the standard library gained after 3.10, the oldest Python the controller runs on (a laptop's)."""

import sys

if sys.version_info >= (3, 11):  # noqa: UP036 (lint runs as 3.11; the package installs on 3.10)
    import tomllib
else:  # the same parser, as a package (a dependency on 3.10 only: pyproject.toml)
    import tomli as tomllib

__all__ = ["tomllib"]
