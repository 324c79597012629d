"""Arguments of the public constructors, checked: a typo or a misplaced option fails at once.

Pydantic models (the tools, the toolkit) ignore unknown fields by default, and a plain
``TypeError`` says only that an argument is unexpected. Here an unknown argument raises
[`UnknownArgumentError`][langchain_sandbox.UnknownArgumentError] naming the closest valid one
(``providr`` -> ``provider``) or, for an option of another object, where it belongs
(``isolation`` is the local provider's: ``provider=LocalProvider(isolation='none')``).
Options for a provider given by name (``provider_options``) are checked against that provider's
own parameters, without building it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, ParamSpec

from pydantic import BaseModel

from langchain_sandbox.errors import UnknownArgumentError
from langchain_sandbox.providers import provider_class
from langchain_sandbox.providers.base import Limits, Provider, SessionSpec
from langchain_sandbox.providers.names import PROVIDER_NAMES

P = ParamSpec("P")


def parameter_names(function: Callable[..., Any]) -> list[str]:
    """The names ``function`` takes as keyword arguments (``self`` and ``*args`` left out)."""
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


@functools.cache
def _provider_parameters(name: str) -> tuple[str, ...]:
    return tuple(parameter_names(provider_class(name).__init__))


def _runtime_parameters() -> list[str]:
    # Imported here: the runtime imports the session pool, which imports this module.
    from langchain_sandbox.runtime import SandboxRuntime

    return parameter_names(SandboxRuntime.__init__)


def _home(argument: str, value: Any, valid: Collection[str]) -> str | None:
    """Where ``argument`` belongs when it is an option of a provider, of the runtime or of the
    session spec, said as the call an owner taking ``valid`` arguments would make."""
    for name in PROVIDER_NAMES:
        if argument in _provider_parameters(name):
            cls = provider_class(name).__name__
            configured = f"{cls}({argument}={value!r})"
            if "provider" in valid:
                how = f"provider={configured} or provider_options={{{argument!r}: {value!r}}}"
            else:
                how = f"runtime=SandboxRuntime(provider={configured})"
            return f"{argument} is an option of the {name} provider: pass {how}"
    if argument in _runtime_parameters() and "runtime" in valid:
        return (
            f"{argument} is an option of SandboxRuntime: pass "
            f"runtime=SandboxRuntime({argument}={value!r})"
        )
    in_spec = "spec" in valid
    spec_call = (
        "spec=SessionSpec({})" if in_spec else "runtime=SandboxRuntime(spec=SessionSpec({}))"
    )
    if argument in SessionSpec.__dataclass_fields__:
        where = spec_call.format(f"{argument}={value!r}")
        return f"{argument} is a field of SessionSpec: pass {where}"
    if argument in Limits.__dataclass_fields__:
        where = spec_call.format(f"limits=Limits({argument}={value!r})")
        return f"{argument} is a field of Limits: pass {where}"
    return None


def unknown_argument(owner: str, argument: str, value: Any, valid: Collection[str]) -> str:
    """The sentence for ``argument``, which ``owner`` does not take."""
    home = _home(argument, value, valid)
    if home is not None:
        return f"{owner} got an unknown argument {argument!r}: {home}."
    close = difflib.get_close_matches(argument, list(valid), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    choices = ", ".join(sorted(v for v in valid if not v.startswith("_")))
    return f"{owner} got an unknown argument {argument!r}.{hint} It takes: {choices}."


def check_arguments(owner: str, given: Mapping[str, Any], valid: Collection[str]) -> None:
    """Raise [`UnknownArgumentError`][langchain_sandbox.UnknownArgumentError] for the first argument in ``given`` not in ``valid``."""
    for argument, value in given.items():
        if argument not in valid:
            raise UnknownArgumentError(unknown_argument(owner, argument, value, valid))


def check_model_arguments(model: type[BaseModel], data: Any) -> None:
    """``check_arguments`` for the input of a pydantic model (its fields and their aliases), and
    ``check_provider_options`` for a model that takes a provider."""
    if not isinstance(data, Mapping):
        return
    valid = set(model.model_fields)
    valid.update(f.alias for f in model.model_fields.values() if f.alias)
    check_arguments(model.__name__, data, valid)
    if "provider_options" in valid:
        check_provider_options(data.get("provider"), data.get("provider_options"))


def checked_init(init: Callable[P, None]) -> Callable[P, None]:
    """Wrap a constructor so that an unknown keyword argument raises
    [`UnknownArgumentError`][langchain_sandbox.UnknownArgumentError] (a ``TypeError`` too) naming the closest valid one."""
    valid = parameter_names(init)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values())

    @functools.wraps(init)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        if not takes_any:
            check_arguments(type(args[0]).__name__, kwargs, valid)
        init(*args, **kwargs)

    return wrapper


def check_provider_options(
    provider: str | Provider | None, options: Mapping[str, Any] | None
) -> None:
    """Refuse ``options`` a provider given by name would not take, and options given with a
    provider object (configure the object itself) or with no provider at all."""
    if not options:
        return
    if provider is None:
        raise UnknownArgumentError("provider_options need a provider: pass provider= too.")
    if isinstance(provider, Provider):
        raise UnknownArgumentError(
            f"provider_options apply only when the provider is given by name; configure the "
            f"{type(provider).__name__} you pass instead."
        )
    valid = _provider_parameters(provider)
    for option, value in options.items():
        if option not in valid:
            close = difflib.get_close_matches(option, valid, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UnknownArgumentError(
                f"The {provider} provider has no option {option!r} (given as "
                f"provider_options={{{option!r}: {value!r}}}).{hint} "
                f"Its options: {', '.join(valid)}."
            )


__all__ = [
    "check_arguments",
    "check_model_arguments",
    "check_provider_options",
    "checked_init",
    "parameter_names",
    "unknown_argument",
]
