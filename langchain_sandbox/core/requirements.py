"""Validation of package requirements a model asks to install.

A model may only name packages: ``numpy``, ``pandas==2.2.3``, ``requests[socks]>=2``. Options
(``--index-url``), URLs, paths and shell syntax (``; rm -rf /``, ``$(...)``) are refused before
any provider sees them, so installing can never be turned into running an arbitrary command or
pulling code from an arbitrary host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from langchain_sandbox.errors import InvalidPackageNameError

# PEP 508 name, optional extras, optional version specifiers; nothing else.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_EXTRAS = rf"(?:\[{_NAME}(?:\s*,\s*{_NAME})*\])?"
_VERSION = r"[A-Za-z0-9.*+!_-]+"
_SPEC = rf"(?:~=|===|==|!=|<=|>=|<|>)\s*{_VERSION}"
_REQUIREMENT = re.compile(rf"^{_NAME}\s*{_EXTRAS}\s*(?:{_SPEC}(?:\s*,\s*{_SPEC})*)?$")

MAX_PACKAGES = 32


def validate_requirements(names: Iterable[str]) -> list[str]:
    """Return the requirements stripped of surrounding blanks, or raise on the first bad one.

    Raises:
        InvalidPackageNameError: an entry is empty, too long, or not a plain requirement.
    """
    result: list[str] = []
    for raw in names:
        name = raw.strip() if isinstance(raw, str) else ""
        if not name or len(name) > 200 or not _REQUIREMENT.match(name):
            raise InvalidPackageNameError(
                f"{raw!r} is not a package requirement. Give names such as 'numpy' or "
                "'pandas==2.2.3'; options, URLs, paths and shell syntax are not allowed."
            )
        result.append(name)
    if not result:
        raise InvalidPackageNameError("Name at least one package to install.")
    if len(result) > MAX_PACKAGES:
        raise InvalidPackageNameError(f"At most {MAX_PACKAGES} packages can be installed at once.")
    return result


__all__ = ["MAX_PACKAGES", "validate_requirements"]
