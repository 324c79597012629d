"""The environment variables a sandbox is given: only the ones asked for, and well-formed.

Every provider passes a session's and a call's variables through `validate_env` before any
process starts or any request is sent, so a bad name fails the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

from langchain_sandbox.errors import InvalidInputError


def validate_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Variables for the sandbox: names and values must be plain strings without NUL or ``=``.

    Raises:
        InvalidInputError: on the first bad entry.
    """
    checked: dict[str, str] = {}
    for key, value in (env or {}).items():
        if (
            not isinstance(key, str)
            or not isinstance(value, str)
            or not key
            or "=" in key
            or "\x00" in key
            or "\x00" in value
        ):
            raise InvalidInputError(f"Invalid environment variable {key!r}.")
        checked[key] = value
    return checked


__all__ = ["validate_env"]
