"""The host side of a session's network policy: an HTTP(S) proxy that is the sandbox's only way out.

The sandbox has a network namespace of its own with no route anywhere. Its processes reach this
proxy through the sandbox's loopback (`_egress_sandbox`: a relay copies each connection to a
unix socket bound into the sandbox). For every request the proxy:

* takes the target from the request (a ``CONNECT`` authority, or an absolute ``http://`` URL), and
  refuses it (``403`` with the reason) unless the session's `NetworkPolicy` allows that host and
  port; inside a tunnel every request's ``Host`` must name the tunnel's own host;
* resolves the name on the host, refuses a name that resolves to a loopback, private, link-local
  or otherwise non-public address unless the policy allows that address itself, and connects to
  the address it checked (no second lookup for a rebinding DNS to answer differently);
* terminates TLS with a certificate from the session's own CA (`SessionCA`), HTTP/1.1 only, and
  verifies the upstream server with the host's trust store (or `EgressUpstream.ca_file`); a
  tunnel that does not start with TLS is read as plain HTTP (`_egress_relay.tunnel_is_tls`);
* replaces each secret's placeholder in the request's headers with its value, toward that secret's
  hosts only;
* relays a WebSocket once its upgrade request passed all of the above (`_egress_relay.relay`), and
  refuses any other upgrade (h2c included).

Connections come through the proxy's unix socket (clients that read the proxy variables) or
through the transparent path (`_egress_transparent`: under bubblewrap on listeners of its own,
under gVisor through the same socket, behind `RELAYED`), where the host is the TLS SNI or the
``Host`` header and everything above applies the same way.

HTTP/1.1 is parsed by ``h11`` (the ``egress`` extra) on both sides: the proxy never frames a
message by hand, so a request the two sides could read differently is an error, not a bypass.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_sandbox.errors import MissingDependencyError
from langchain_sandbox.network import NetworkPolicy, ip_literal, normal_host
from langchain_sandbox.providers.local._egress_ca import SessionCA
from langchain_sandbox.providers.local._egress_relay import (
    Upstream,
    next_event,
    refused_upgrade,
    relay,
    tunnel_is_tls,
    upgrade_headers,
    upgrade_tokens,
)
from langchain_sandbox.providers.local._egress_sandbox import CA_FILE, EGRESS_SOCKET
from langchain_sandbox.providers.local._egress_transparent import RELAYED, TransparentPath
from langchain_sandbox.providers.local._unix_server import serving_unix

_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te", b"upgrade"}
)


def _h11() -> Any:
    try:
        import h11
    except ImportError:
        raise MissingDependencyError(
            "h11", "egress", purpose="A NetworkPolicy on the local provider"
        ) from None
    return h11


@dataclass(frozen=True)
class EgressUpstream:
    """How the egress proxy reaches upstream servers (the defaults suit nearly everyone).

    Attributes:
        ca_file: Certificates to verify upstream servers with instead of the host's trust store
            (a corporate CA; a test server's CA).
        hosts: Fixed answers used instead of the host's resolver (as ``/etc/hosts`` would, for
            this proxy only): an address, or ``address:port`` to connect to another port than
            the request's (a local stand-in server for a name's port 443). The address checks
            still apply, to the address and port connected to.
    """

    ca_file: str | None = None
    hosts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Tunnel:
    """A ``CONNECT`` tunnel the policy allowed: every request in it goes to this endpoint."""

    host: str
    port: int
    address: tuple[str, int]
    tls: bool


_Opening = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter],
    Awaitable["tuple[Any, Any, _Tunnel | None] | None"],
]
"""How a connection starts: its h11 connection, first event and tunnel (``None``: answered)."""


class _Denied(Exception):
    """A request the policy refuses; its message is the reason the sandbox's code reads."""


class EgressProxy:
    """One session's egress proxy; see the module docstring.

    Attributes:
        denied: Each refused request's reason, in order (the session turns new ones into notices).
    """

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        socket_path: str,
        ca: SessionCA,
        upstream: EgressUpstream | None = None,
    ) -> None:
        self.policy = policy
        self.socket_path = socket_path
        self.ca = ca
        self.upstream = upstream or EgressUpstream()
        self.denied: list[str] = []
        self._h11 = _h11()
        self._client_context = ssl.create_default_context(cafile=self.upstream.ca_file)
        self._client_context.set_alpn_protocols(["http/1.1"])
        sni_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sni_context.sni_callback = self._sni
        self.transparent = TransparentPath(self._serve_transparent, sni_context)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[EgressProxy]:
        """Serve while the session lives."""
        async with serving_unix(self.socket_path, self._serve):
            try:
                yield self
            finally:
                await self.transparent.close()

    # ------------------------------------------------------------------ policy

    async def _address(self, host: str, port: int) -> tuple[str, int]:
        """The checked address and port to connect to for ``host:port``, or raise `_Denied`."""
        if not self.policy.allows(host, port):
            raise _Denied(
                f"{_authority(host, port)} is not allowed by the session's network policy"
            )
        if ip_literal(host) is not None:
            return host, port
        if host in self.upstream.hosts:
            address, port = _split_authority(self.upstream.hosts[host], port)
            candidates = [address]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except OSError:
                raise _Denied(f"{host} does not resolve") from None
            candidates = [str(info[4][0]) for info in infos]
        for address in candidates:
            if ipaddress.ip_address(address).is_global or self.policy.allows(address, port):
                return address, port
        raise _Denied(
            f"{host} resolves to {candidates[0]}, a non-public address the policy does not allow"
        )

    def _headers(self, headers: Any, host: str, port: int) -> list[tuple[bytes, bytes]]:
        """The request's headers as they go upstream: hop-by-hop ones dropped, placeholders of
        secrets bound to ``host`` replaced (and only those)."""
        swaps = [
            (secret.placeholder.encode(), secret.value.encode())
            for secret in self.policy.secrets
            if secret.sent_to(host, port)
        ]
        kept = []
        for name, value in headers:
            if name in _HOP_BY_HOP:
                continue
            for placeholder, real in swaps:
                value = value.replace(placeholder, real)
            kept.append((name, value))
        return kept

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readexactly(1)
        except (OSError, asyncio.IncompleteReadError):
            writer.close()
            return
        if head == RELAYED:
            await self.transparent.serve_relayed(reader, writer)
        else:
            await self._answer(reader, writer, functools.partial(self._open_proxied, head=head))

    async def _serve_transparent(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        """Answer a connection the sandbox made to the transparent path's ``port``
        (`_egress_transparent`): the host comes from the SNI (443) or the ``Host`` header (80)."""
        await self._answer(reader, writer, functools.partial(self._open_transparent, port=port))

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, opening: _Opening
    ) -> None:
        """Answer one connection's requests, in order, until it ends or one is refused."""
        h11 = self._h11
        upstream: Upstream | None = None
        try:
            opened = await opening(reader, writer)
            if opened is None:
                return
            client, request, tunnel = opened
            while isinstance(request, h11.Request):
                upstream = await self._exchange(client, reader, writer, request, tunnel, upstream)
                if upstream is None or client.our_state is not h11.DONE:
                    return
                client.start_next_cycle()
                request = await _next(client, reader)
        except (OSError, ssl.SSLError, h11.ProtocolError, asyncio.IncompleteReadError):
            return
        finally:
            if upstream is not None:
                upstream.close()
            writer.close()

    async def _open_proxied(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, head: bytes
    ) -> tuple[Any, Any, _Tunnel | None] | None:
        """A proxy client's first request (through its ``CONNECT`` tunnel, if it opens one),
        ``head`` its first byte(s), already read."""
        h11 = self._h11
        client = h11.Connection(h11.SERVER)
        client.receive_data(head)
        request = await _next(client, reader)
        if not isinstance(request, h11.Request) or request.method != b"CONNECT":
            return client, request, None
        host, port = _split_authority(request.target.decode("latin-1"), 443)
        try:
            address = await self._address(host, port)
        except _Denied as denied:
            await self._deny(client, writer, str(denied))
            return None
        writer.write(client.send(h11.Response(status_code=200, headers=[])))
        pending = client.trailing_data[0]
        tls = await tunnel_is_tls(writer, pending)
        client = h11.Connection(h11.SERVER)
        if tls:
            if pending:  # a ClientHello sent before the 200: start_tls cannot take it
                return None
            await writer.start_tls(self.ca.server_context(host))
        elif pending:  # (h11 reads an empty chunk as the end of the stream)
            client.receive_data(pending)
        return client, await _next(client, reader), _Tunnel(host, port, address, tls)

    async def _open_transparent(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, port: int
    ) -> tuple[Any, Any, _Tunnel | None] | None:
        """A transparent connection's first request, its host checked as a ``CONNECT``'s."""
        h11 = self._h11
        client = h11.Connection(h11.SERVER)
        request = await _next(client, reader)
        if not isinstance(request, h11.Request):
            return None
        tls = writer.get_extra_info("ssl_object")
        if tls is not None:
            host = tls.egress_host  # set by _sni, before the handshake ended
        else:
            named = [v.decode("latin-1") for n, v in request.headers if n == b"host"]
            host = _split_authority(named[0], port)[0] if named else ""
        try:
            if not host:
                raise _Denied("a request to the transparent path must name its host")
            address = await self._address(host, port)
        except _Denied as denied:
            await self._deny(client, writer, str(denied))
            return None
        return client, request, _Tunnel(host, port, address, tls is not None)

    def _sni(self, ssl_object: Any, name: str | None, context: ssl.SSLContext) -> int | None:
        """Present a certificate for the name the client asked for (the policy decides after
        the handshake, with a 403 the client can read); refuse a handshake without a name."""
        if not name:
            self.denied.append("a TLS connection to the transparent path named no host (SNI)")
            return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE
        host = normal_host(name)
        ssl_object.context = self.ca.server_context(host)
        ssl_object.egress_host = host
        return None

    async def _exchange(
        self,
        client: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Any,
        tunnel: _Tunnel | None,
        upstream: Upstream | None,
    ) -> Upstream | None:
        """Answer one request (forwarded or refused); the upstream connection to keep, or
        ``None`` when the client's connection must end."""
        h11 = self._h11
        try:
            host, port, address, target = await self._target(request, tunnel)
            upgrade = upgrade_tokens(request.headers)
            if upgrade and (refusal := refused_upgrade(upgrade)):
                raise _Denied(refusal)
        except _Denied as denied:
            await self._deny(client, writer, str(denied))
            return None
        if upstream is None or not upstream.reusable(host, port):
            if upstream is not None:
                upstream.close()
            try:
                tls = tunnel is not None and tunnel.tls
                upstream = await Upstream.open(
                    h11, host, port, address, self._client_context if tls else None
                )
            except ssl.SSLCertVerificationError as exc:
                reason = f"{_authority(host, port)} presented a certificate that does not verify"
                await self._deny(client, writer, f"{reason} ({exc.verify_message})", status=502)
                return None
            except (OSError, TimeoutError):
                reason = f"{_authority(host, port)} could not be reached"
                await self._deny(client, writer, reason, status=502)
                return None
        headers = self._headers(request.headers, host, port)
        if upgrade:
            headers = upgrade_headers(headers)
        await upstream.send(h11.Request(method=request.method, target=target, headers=headers))
        while not isinstance(event := await _next(client, reader), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                await upstream.send(h11.Data(data=event.data))
        await upstream.send(h11.EndOfMessage())
        response = await upstream.next()
        while isinstance(response, h11.InformationalResponse):
            if response.status_code == 101 and upgrade:
                await self._switch(client, reader, writer, upstream, response)
                return None
            response = await upstream.next()
        if not isinstance(response, h11.Response):
            raise h11.RemoteProtocolError("no response from upstream")
        kept = [(n, v) for n, v in response.headers if n not in _HOP_BY_HOP]
        writer.write(client.send(h11.Response(status_code=response.status_code, headers=kept)))
        while not isinstance(event := await upstream.next(), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                writer.write(client.send(h11.Data(data=event.data)))
                await writer.drain()
        writer.write(client.send(h11.EndOfMessage()))
        await writer.drain()
        return upstream

    async def _switch(
        self,
        client: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: Upstream,
        response: Any,
    ) -> None:
        """Pass the upstream's ``101`` on and relay the switched connection until it ends."""
        h11 = self._h11
        kept = [(n, v) for n, v in response.headers if n not in _HOP_BY_HOP]
        switch = h11.InformationalResponse(status_code=101, headers=upgrade_headers(kept))
        writer.write(client.send(switch))
        early = (client.trailing_data[0], upstream.connection.trailing_data[0])
        await relay((reader, writer), (upstream.reader, upstream.writer), early)

    async def _target(
        self, request: Any, tunnel: _Tunnel | None
    ) -> tuple[str, int, tuple[str, int], bytes]:
        """``(host, port, address, origin-form target)`` of a request, or raise `_Denied`."""
        named = [value.decode("latin-1") for name, value in request.headers if name == b"host"]
        if tunnel is not None:
            host, port, address = tunnel.host, tunnel.port, tunnel.address
            target = request.target
            if not target.startswith(b"/"):
                raise _Denied("a request inside a tunnel must use a path, not a URL")
        else:
            url = request.target.decode("latin-1")
            if not url.lower().startswith("http://"):
                raise _Denied("send plain HTTP as an absolute http:// URL; HTTPS through CONNECT")
            authority, _, path = url[7:].partition("/")
            host, port = _split_authority(authority, 80)
            address = await self._address(host, port)
            target = ("/" + path).encode("latin-1")
        if named and _split_authority(named[0], port) != (host, port):
            raise _Denied(f"the Host header {named[0]!r} is not {_authority(host, port)}")
        return host, port, address, target

    async def _deny(
        self, client: Any, writer: asyncio.StreamWriter, reason: str, *, status: int = 403
    ) -> None:
        """Answer with ``status`` and ``reason`` (a refusal, ``403``, is counted in `denied`)."""
        h11 = self._h11
        if status == 403:
            self.denied.append(reason)
        body = f"langchain-sandbox egress proxy: {reason}.\n".encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        with contextlib.suppress(h11.LocalProtocolError):
            # The reason in the status line too: a client shows only that for a refused CONNECT.
            phrase = reason.encode("ascii", "replace")[:200]
            response = h11.Response(status_code=status, headers=headers, reason=phrase)
            writer.write(client.send(response))
            writer.write(client.send(h11.Data(data=body)))
            writer.write(client.send(h11.EndOfMessage()))
            await writer.drain()


async def _next(connection: Any, reader: asyncio.StreamReader) -> Any:
    """The next h11 event of ``connection``, reading from ``reader`` as it needs."""
    return await next_event(_h11(), connection, reader)


def _split_authority(authority: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port`` too) as a normal host and a port (``-1`` if invalid)."""
    text = authority.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not port_text:
        return normal_host(host), default_port
    return normal_host(host), int(port_text) if port_text.isdigit() else -1


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def prepare_egress(
    directory: str, policy: NetworkPolicy, upstream: EgressUpstream | None
) -> tuple[EgressProxy, str]:
    """A session's proxy and the host directory to bind at `EGRESS_DIR` (its socket and the
    CA's certificate); the CA's key stays in this process (touches the disk: off the loop)."""
    egress_dir = os.path.join(directory, "egress")
    scratch = os.path.join(directory, "egress-keys")
    os.mkdir(egress_dir, 0o755)
    os.chmod(egress_dir, 0o755)  # whatever the umask: the sandbox's user reads it
    os.mkdir(scratch, 0o700)
    ca = SessionCA(scratch)
    certificate = os.path.join(egress_dir, CA_FILE)
    with open(certificate, "wb") as handle:
        handle.write(ca.certificate_pem)
    os.chmod(certificate, 0o644)
    socket_path = os.path.join(egress_dir, os.path.basename(EGRESS_SOCKET))
    return EgressProxy(policy, socket_path=socket_path, ca=ca, upstream=upstream), egress_dir


__all__ = ["EgressProxy", "EgressUpstream", "prepare_egress"]
