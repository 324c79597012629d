"""Network policies: which hosts sandboxed code may reach, and secrets it can use but never read.

``SessionSpec(network=...)`` is ``False`` (no network), ``True`` (the provider's open network) or a
`NetworkPolicy`. A policy allows named hosts and nothing else; each `Secret` is visible in the
sandbox only as a placeholder (`Secret.placeholder`), which the provider's egress proxy replaces
with the real value in request headers toward the secret's own hosts, and only there. A policy
a provider cannot enforce is refused when the session is created. See ``docs/network.md``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_sandbox.errors import ConfigurationError, InvalidInputError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
_DEFAULT_PORTS = (80, 443)


def normal_host(host: str) -> str:
    """``host`` as policies compare it: lower case, no brackets, no trailing dot."""
    return host.strip().strip("[]").rstrip(".").lower()


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` spells, or ``None`` for a name."""
    try:
        return ipaddress.ip_address(normal_host(host))
    except ValueError:
        return None


@dataclass(frozen=True)
class _Rule:
    host: str  # a name, an address, or ``*.suffix``
    port: int | None  # ``None``: 80 and 443

    @classmethod
    def parse(cls, entry: str) -> _Rule:
        text = entry.strip().lower()
        port: int | None = None
        if text.startswith("["):  # [v6]:port or [v6]
            host, _, rest = text[1:].partition("]")
            if rest:
                port = _port(entry, rest.removeprefix(":"))
        elif text.count(":") == 1:
            host, _, given = text.partition(":")
            port = _port(entry, given)
        else:
            host = text
        host = normal_host(host)
        if ip_literal(host) is None:
            name = host.removeprefix("*.")
            if not name or not all(_LABEL.match(label) for label in name.split(".")):
                raise InvalidInputError(
                    f"NetworkPolicy allow entry {entry!r} is not a host name, an address, "
                    "'host:port' or '*.domain'."
                )
        return cls(host, port)

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else _DEFAULT_PORTS):
            return False
        if self.host.startswith("*."):
            # Wildcards match names only: never an address spelled in the request.
            return ip_literal(host) is None and host.endswith(self.host[1:])
        literal = ip_literal(self.host)
        if literal is not None:
            return literal == ip_literal(host)
        return host == self.host


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InvalidInputError(f"NetworkPolicy allow entry {entry!r} has no valid port.")
    return int(text)


@dataclass(frozen=True)
class Secret:
    """A value sandboxed code can use on ``hosts`` without ever reading it.

    Inside the sandbox the environment variable ``name`` holds `placeholder`; the egress proxy
    puts ``value`` in its place in request headers sent to one of ``hosts`` (policy entries,
    wildcards allowed), and leaves the placeholder as it is toward any other host. The value is
    never written anywhere: `repr` masks it and a session's record keeps only the name.

    Args:
        name: The environment variable (an identifier).
        value: The real value (held by the host process only).
        hosts: Where the value may go; each must also be allowed by the policy.
    """

    name: str
    value: str = field(repr=False)
    hosts: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidInputError(f"Secret name {self.name!r} is not an identifier.")
        if not self.value or any(c in self.value for c in "\r\n\0"):
            # Never quote the value: the message reaches logs.
            raise InvalidInputError(f"Secret {self.name!r} has an empty value or a line break.")
        if not self.hosts:
            raise InvalidInputError(f"Secret {self.name!r} is bound to no host.")
        object.__setattr__(self, "hosts", tuple(self.hosts))
        for host in self.hosts:
            _Rule.parse(host)

    def __repr__(self) -> str:
        return f"Secret(name={self.name!r}, value='***', hosts={list(self.hosts)!r})"

    @property
    def placeholder(self) -> str:
        """What the sandbox sees instead of the value: stable across sessions, so a placeholder
        the code stored before a checkpoint still works after a restore."""
        return f"__LANGCHAIN_SANDBOX_SECRET_{self.name}__"

    def sent_to(self, host: str, port: int) -> bool:
        """Whether the value replaces the placeholder in a request to ``host:port``."""
        return any(_Rule.parse(entry).matches(normal_host(host), port) for entry in self.hosts)


@dataclass(frozen=True)
class NetworkPolicy:
    """Network for sandboxed code that reaches ``allow`` and nothing else.

    Args:
        allow: Host names (``"api.example.com"``, ports 80 and 443), ``"host:port"``, wildcards
            (``"*.example.com"``: subdomains, not the domain itself) and addresses
            (``"127.0.0.1:8080"``, ``"[::1]:8080"``). A name that resolves to a loopback,
            private or link-local address is refused unless that address is allowed too.
        secrets: Values the code uses through placeholders (see `Secret`).
    """

    allow: Sequence[str] = ()
    secrets: Sequence[Secret] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "secrets", tuple(self.secrets))
        rules = tuple(_Rule.parse(entry) for entry in self.allow)
        object.__setattr__(self, "_rules", rules)
        names = [secret.name for secret in self.secrets]
        if len(set(names)) != len(names):
            raise InvalidInputError("NetworkPolicy has two secrets with the same name.")

    def allows(self, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` (a name or an address) is allowed."""
        rules: tuple[_Rule, ...] = getattr(self, "_rules")  # noqa: B009 (set in __post_init__)
        host = normal_host(host)
        return any(rule.matches(host, port) for rule in rules)

    @property
    def entries(self) -> tuple[tuple[str, int | None], ...]:
        """Each ``allow`` entry as ``(host, port)``: the host normalised (a name, an address or
        ``*.suffix``), the port ``None`` where the entry names none (80 and 443). Remote
        providers map these onto their own allow-lists."""
        rules: tuple[_Rule, ...] = getattr(self, "_rules")  # noqa: B009 (set in __post_init__)
        return tuple((rule.host, rule.port) for rule in rules)

    def sandbox_env(self) -> dict[str, str]:
        """The placeholders the sandbox sees, by variable name."""
        return {secret.name: secret.placeholder for secret in self.secrets}

    def record(self) -> dict[str, Any]:
        """JSON-safe form for a session's record: the hosts and each secret's name and hosts,
        never a value."""
        return {
            "allow": list(self.allow),
            "secrets": [{"name": s.name, "hosts": list(s.hosts)} for s in self.secrets],
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any], values: Mapping[str, str]) -> NetworkPolicy:
        """The policy `record` described, with each secret's value supplied again by the
        application (``values`` by name); a missing one is a `ConfigurationError`."""
        missing = [s["name"] for s in data.get("secrets", ()) if s["name"] not in values]
        if missing:
            raise ConfigurationError(
                f"The session's network policy uses secrets {', '.join(missing)}, whose values "
                "are never stored: supply them again (NetworkPolicy.from_record(record, values))."
            )
        secrets = [Secret(s["name"], values[s["name"]], s["hosts"]) for s in data["secrets"]]
        return cls(allow=data.get("allow", ()), secrets=secrets)


def network_record(network: bool | NetworkPolicy) -> bool | dict[str, Any]:
    """``SessionSpec.network`` as a session record keeps it (no secret values)."""
    return network.record() if isinstance(network, NetworkPolicy) else bool(network)


def refuse_policy(network: bool | NetworkPolicy, provider: str, *, offers: str) -> None:
    """Raise `ConfigurationError` for a `NetworkPolicy` on a provider that cannot enforce one
    (``offers``: what the platform has, for the message), rather than run the session with
    more network than the policy allows."""
    if isinstance(network, NetworkPolicy):
        raise ConfigurationError(
            f"The {provider} provider does not enforce a NetworkPolicy ({offers}); use "
            "network=False or True there, or the local provider for a policy (docs/network.md)."
        )


def refuse_secrets(policy: NetworkPolicy, provider: str, *, why: str) -> None:
    """Raise `ConfigurationError` when ``policy`` has secrets ``provider`` cannot swap in
    (``why``: what the platform has instead), naming them but never quoting a value."""
    if policy.secrets:
        names = ", ".join(secret.name for secret in policy.secrets)
        raise ConfigurationError(
            f"{provider} cannot enforce the NetworkPolicy's secrets ({names}): {why}. Use the "
            f"local provider for secrets, or a policy without them on {provider} "
            "(docs/network.md)."
        )


def denied_notice(reasons: Sequence[str]) -> list[str]:
    """The notice a result carries for requests the egress proxy refused during the call."""
    if not reasons:
        return []
    shown = "; ".join(dict.fromkeys(reasons))
    count = f"{len(reasons)} request{'s' if len(reasons) != 1 else ''}"
    return [f"The network policy refused {count} (HTTP 403): {shown}."]


__all__ = [
    "NetworkPolicy",
    "Secret",
    "denied_notice",
    "ip_literal",
    "network_record",
    "normal_host",
    "refuse_policy",
    "refuse_secrets",
]
