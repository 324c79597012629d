"""Upstream servers for the egress proxy's tests: HTTP and HTTPS on the host's 127.0.0.1, the
HTTPS one with a certificate from a test CA that only the proxy under test is told to trust;
WebSocket echo servers (``ws`` and ``wss``, the same CA) beside them.

Every request they get is recorded (host, path, headers), so a test can show what reached an
upstream, and what never did."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.http11 import Request as WebSocketRequest
from websockets.sync.server import Server as WebSocketServer
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as websocket_serve

from langchain_sandbox import SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider, LocalSession


@dataclass
class Seen:
    """One request an upstream server received."""

    host: str
    path: str
    headers: dict[str, str]


@dataclass
class Upstreams:
    """The running servers: their ports, the test CA's file and what they received."""

    http_port: int
    https_port: int
    ca_file: str
    seen: list[Seen] = field(default_factory=list)
    ws_port: int = 0
    wss_port: int = 0


def _certificates(directory: Path, names: Sequence[str]) -> tuple[Path, Path]:
    """A test CA (its certificate's path) and a server certificate+key for ``names``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "egress test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alternatives.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "test-ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(
        server.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, chain


def _handler(seen: list[Seen]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per response, sent at once: no delayed-ACK stall to time by mistake.
        disable_nagle_algorithm = True
        wbufsize = 65536

        def do_GET(self) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            seen.append(Seen(headers.get("host", ""), self.path, headers))
            if self.path.startswith("/redirect?to="):
                self.send_response(302)
                self.send_header("Location", self.path.removeprefix("/redirect?to="))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"path": self.path, "headers": headers}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def _echo(connection: ServerConnection) -> None:
    for message in connection:
        connection.send(message)


def _websocket_server(seen: list[Seen], context: ssl.SSLContext | None) -> WebSocketServer:
    def record(connection: ServerConnection, request: WebSocketRequest) -> None:
        headers = {name.lower(): value for name, value in request.headers.raw_items()}
        seen.append(Seen(headers.get("host", ""), request.path, headers))

    return websocket_serve(_echo, "127.0.0.1", 0, ssl=context, process_request=record)


def serve_upstreams(directory: Path, names: Sequence[str]) -> Iterator[Upstreams]:
    """Run the servers until the generator is closed (a fixture's body)."""
    ca_file, chain = _certificates(directory, names)
    seen: list[Seen] = []
    plain = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    secure = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    ws, wss = _websocket_server(seen, None), _websocket_server(seen, context)
    servers: list[ThreadingHTTPServer | WebSocketServer] = [plain, secure, ws, wss]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        ports = [plain.server_address[1], secure.server_address[1]]
        ws_ports = [ws.socket.getsockname()[1], wss.socket.getsockname()[1]]
        yield Upstreams(*ports, str(ca_file), seen, *ws_ports)
    finally:
        for server in (plain, secure):
            server.shutdown()
            server.server_close()
        for websocket_server in (ws, wss):
            websocket_server.shutdown()


@contextlib.asynccontextmanager
async def egress_session(
    base_dir: Path, isolation: str, upstream: EgressUpstream, spec: SessionSpec
) -> AsyncIterator[LocalSession]:
    """A session made by a local provider whose egress proxy uses ``upstream``; the session and
    the provider close with the block."""
    provider = LocalProvider(base_dir=base_dir, isolation=isolation, egress_upstream=upstream)
    try:
        made = await provider.create(spec)
        try:
            yield made
        finally:
            await made.close()
    finally:
        await provider.aclose()
