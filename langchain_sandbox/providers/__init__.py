"""Sandbox backends behind one contract (`langchain_sandbox.providers.base`).

``get_provider("local" | "e2b" | "runloop", **options)`` builds one by name. Provider SDKs are
optional extras imported only when their provider is built, so importing this package never needs
them.
"""

from __future__ import annotations

import importlib
from typing import Any

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import (
    Capabilities,
    ChangeListing,
    FileInfo,
    FileMetadata,
    Limits,
    OutputCallback,
    Provider,
    Session,
    SessionRecord,
    SessionSpec,
    VariablesDump,
)
from langchain_sandbox.providers.names import E2B, KUBERNETES, LOCAL, PROVIDER_NAMES, RUNLOOP

_PROVIDERS = {
    LOCAL: ("langchain_sandbox.providers.local", "LocalProvider"),
    E2B: ("langchain_sandbox.providers.e2b", "E2BProvider"),
    RUNLOOP: ("langchain_sandbox.providers.runloop", "RunloopProvider"),
    KUBERNETES: ("langchain_sandbox.providers.kubernetes", "KubernetesProvider"),
}


def get_provider(name: str | Provider = LOCAL, **options: Any) -> Provider:
    """Return a provider: ``name`` is ``"local"``, ``"e2b"``, ``"runloop"``, ``"kubernetes"``
    or a ``Provider``."""
    if isinstance(name, Provider):
        if options:
            raise InvalidInputError("Options apply only when the provider is given by name.")
        return name
    # Imported here: the checks name the providers' parameters, so they import this package.
    from langchain_sandbox.core.arguments import check_provider_options

    check_provider_options(name, options)
    provider: Provider = provider_class(name)(**options)
    return provider


def provider_class(name: str) -> type[Provider]:
    """The class of the provider called ``name``, without building one (its SDK is not needed:
    provider modules import their SDK only when a provider is made)."""
    try:
        module_name, class_name = _PROVIDERS[name]
    except KeyError:
        raise InvalidInputError(
            f"Unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}."
        ) from None
    found: type[Provider] = getattr(importlib.import_module(module_name), class_name)
    return found


__all__ = [
    "PROVIDER_NAMES",
    "Capabilities",
    "ChangeListing",
    "FileInfo",
    "FileMetadata",
    "Limits",
    "OutputCallback",
    "Provider",
    "Session",
    "SessionRecord",
    "SessionSpec",
    "VariablesDump",
    "get_provider",
    "provider_class",
]
