"""The transparent path of a session's network policy: for clients that ignore the proxy
variables. Every name resolves to a stand-in address inside the sandbox, and connections to its
ports 80 and 443 reach the egress proxy, which takes the host from the TLS SNI (port 443) or the
``Host`` header (port 80) and applies the policy exactly as to a ``CONNECT``
(`TransparentPath`). Names are never looked up anywhere (`dns_answer`), so a query is no channel
out. The two isolation levels differ only in where the listeners live:

* **bubblewrap**: the sandbox's network namespace gets `STAND_IN` on its loopback, and three
  sockets in that namespace that belong to the host process (`open_listeners`): TCP on
  ``STAND_IN:80`` and ``STAND_IN:443``, and UDP on ``127.0.0.1:53``, where glibc asks when there
  is no ``/etc/resolv.conf`` (a sandbox with a policy has none). A short-lived helper process
  enters the namespace to add the address and create the sockets (as the sandbox's user
  namespace's owner it holds the capabilities there; the sandbox's own processes hold none, so
  they can neither take these ports nor add a route), and hands them back over a unix socket
  pair; `DnsResponder` answers on the host.
* **gVisor**: its network stack lives in its Sentry, where the host cannot make sockets. The
  egress relay binds the same three sockets inside, before the worker starts
  (`SANDBOX_LISTENERS`), on `GVISOR_STAND_IN`: a loopback address, which the Sentry's loopback
  takes without ``CAP_NET_ADMIN``; its network stack asks no capability for ports below 1024
  either, so the container keeps none. It answers names itself (the same `dns_answer`) and hands
  each connection to the proxy's unix socket behind `RELAYED` and its port
  (`TransparentPath.serve_relayed`).

An address in the code (an IP literal) is not covered: there is still no route to it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import cast

logger = logging.getLogger(__name__)

STAND_IN = "198.18.0.1"
"""The address every name resolves to inside the sandbox (RFC 2544's benchmarking range: never a
real host's)."""

GVISOR_STAND_IN = "127.18.0.1"
"""`STAND_IN` under gVisor: a loopback address (adding any other takes ``CAP_NET_ADMIN`` there),
not ``127.0.0.1`` itself, so servers the code starts on its own loopback keep every port."""

PORTS = (80, 443)
"""The ports the transparent path listens on: HTTP and HTTPS."""

RELAYED = b"\0"
"""First byte of a connection to the proxy's socket that comes from a transparent listener in a
gVisor sandbox (no HTTP request starts with it); the port follows in two bytes, and the proxy
answers with the same byte before the client's own bytes are sent."""

# A process of its own: the host process must keep its namespaces, and a multithreaded process
# cannot join a user namespace at all.
_HELPER = f"""
import ctypes, fcntl, os, socket, struct, sys
pid, channel = sys.argv[1], socket.socket(fileno=int(sys.argv[2]))
libc = ctypes.CDLL(None, use_errno=True)
def enter(kind, flag):
    if os.stat(f"/proc/{{pid}}/ns/{{kind}}").st_ino == os.stat(f"/proc/self/ns/{{kind}}").st_ino:
        return False
    fd = os.open(f"/proc/{{pid}}/ns/{{kind}}", os.O_RDONLY)
    if libc.setns(fd, flag) != 0:
        raise OSError(ctypes.get_errno(), f"setns({{kind}})")
    return True
try:
    entered = enter("net", 0x40000000)
except PermissionError:  # not root: as the owner of the sandbox's user namespace, from there
    enter("user", 0x10000000)
    entered = enter("net", 0x40000000)
if not entered:
    raise SystemExit("the process shares the host's network namespace")
def ifreq(address):
    packed = socket.inet_aton(address)
    return struct.pack("16sH2s4s8s", b"lo:egress", socket.AF_INET, bytes(2), packed, bytes(8))
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
    fcntl.ioctl(control, 0x8916, ifreq({STAND_IN!r}))  # SIOCSIFADDR
    fcntl.ioctl(control, 0x891C, ifreq("255.255.255.255"))  # SIOCSIFNETMASK
made = [socket.create_server(({STAND_IN!r}, port)) for port in {PORTS!r}]
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 53))
socket.send_fds(channel, [b"ok"], [s.fileno() for s in [*made, dns]])
"""


def _sandbox_pid(pid: int) -> int:
    """A process inside the sandbox's network namespace: the first child of bubblewrap's
    ``pid`` (bubblewrap itself stays outside the namespaces it makes)."""
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        children = handle.read().split()
    if not children:
        raise OSError(f"bubblewrap (pid {pid}) has no sandbox process yet")
    return int(children[0])


def open_listeners(pid: int) -> tuple[list[socket.socket], socket.socket]:
    """The TCP listeners (one per port of `PORTS`) and the DNS socket, made in the network
    namespace of bubblewrap's ``pid`` (blocking: run off the loop)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        done = subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                _HELPER,
                str(_sandbox_pid(pid)),
                str(theirs.fileno()),
            ],
            pass_fds=[theirs.fileno()],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"the transparent path could not be set up: {done.stderr.strip()[-300:]}")
        _, fds, _, _ = socket.recv_fds(ours, 16, len(PORTS) + 1)
    sockets = [socket.socket(fileno=fd) for fd in fds]
    for made in sockets:
        made.setblocking(False)
    return sockets[:-1], sockets[-1]


class TransparentPath:
    """The host's side of one session's transparent path: the DNS responder and the listeners
    in its bubblewrap sandbox's namespace (`open`), or the connections a gVisor sandbox's relay
    hands over (`serve_relayed`), each handed to ``serve(reader, writer, port)`` (TLS on port
    443 with ``tls``, whose SNI callback picks the certificate)."""

    def __init__(
        self,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]],
        tls: ssl.SSLContext,
    ) -> None:
        self._serve = serve
        self._tls = tls
        self._opened: list[asyncio.Server | asyncio.BaseTransport] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.error: str | None = None

    async def open(self, worker_pid: int) -> None:
        """Open the path into the sandbox of bubblewrap's ``worker_pid``; one opened for an
        earlier worker of the session closes. A host where it cannot be set up (`error` says
        why, and a warning is logged) keeps the proxy variables' path only."""
        await self.close()
        try:
            listeners, dns = await asyncio.to_thread(open_listeners, worker_pid)
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = str(exc)
            logger.warning("No transparent egress path for this sandbox: %s", exc)
            return
        self.error = None
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_datagram_endpoint(
                functools.partial(DnsResponder, STAND_IN), sock=dns
            )
            self._opened.append(transport)
            for port, listener in zip(PORTS, listeners, strict=True):
                server = await asyncio.start_server(
                    functools.partial(self._connection, port=port),
                    sock=listener,
                    ssl=self._tls if port == 443 else None,
                )
                self._opened.append(server)
        except BaseException:
            for made in [dns, *listeners]:
                made.close()
            await self.close()
            raise

    async def serve_relayed(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve a connection a gVisor sandbox's relay made for one of its transparent
        listeners (`SANDBOX_LISTENERS`), `RELAYED` already read: its port, the answer, then
        TLS on port 443 with nothing of the client's read ahead (the relay waited for it).
        A port other than `PORTS` is closed: the sandbox may write anything to the socket."""
        try:
            port = int.from_bytes(await reader.readexactly(2), "big")
            if port not in PORTS:
                writer.close()
                return
            writer.write(RELAYED)
            await writer.drain()
            if port == 443:
                await writer.start_tls(self._tls)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            writer.close()
            return
        await self._serve(reader, writer, port)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, port: int
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await self._serve(reader, writer, port)

    async def close(self) -> None:
        """Close the listeners, the responder and every connection (idempotent)."""
        opened, self._opened = self._opened, []
        for item in opened:
            item.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for item in opened:
            if isinstance(item, asyncio.Server):
                await item.wait_closed()


class DnsResponder(asyncio.DatagramProtocol):
    """Answers each query for a name's IPv4 address with ``address``, any other with no record."""

    def __init__(self, address: str) -> None:
        self.address = address

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (Python 3.11's selector datagram transport does not subclass DatagramTransport.)
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        answer = dns_answer(data, self.address)
        if answer is not None:
            self.transport.sendto(answer, addr)


def dns_answer(query: bytes, address: str) -> bytes | None:
    """The reply to one DNS ``query``, whose ``A`` record is ``address`` (``None``: not a query
    this responder reads). Also run inside gVisor sandboxes (`SANDBOX_LISTENERS`): the standard
    library only."""
    if len(query) < 12:
        return None
    ident, flags, questions = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or questions != 1:  # a response, or several questions: not a stub's query
        return None
    end = 12
    while end < len(query) and query[end]:
        if query[end] & 0xC0:  # compression has no place in a question
            return None
        end += query[end] + 1
    end += 5  # the name's last byte, type and class
    if end > len(query):
        return None
    question = query[12:end]
    kind, klass = struct.unpack("!HH", question[-4:])
    answers = b""
    if kind == 1 and klass == 1:  # A, IN
        # The name by pointer (0xC00C: offset 12, the question's), 30 s: changes nothing if cached.
        answers = struct.pack("!HHHIH", 0xC00C, 1, 1, 30, 4) + socket.inet_aton(address)
    # A response, recursion desired copied, recursion available, no error.
    head = struct.pack(
        "!HHHHHH", ident, 0x8000 | (flags & 0x0100) | 0x0080, 1, 1 if answers else 0, 0, 0
    )
    return head + question + answers


SANDBOX_LISTENERS = (
    "import struct\n"
    + inspect.getsource(dns_answer)
    + f"""
def open_transparent():
    try:
        made = [socket.create_server(({GVISOR_STAND_IN!r}, port)) for port in {PORTS!r}]
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dns.bind(("127.0.0.1", 53))
    except OSError:
        return []
    return [*made, dns]
def answer_names(dns):
    while True:
        query, peer = dns.recvfrom(4096)
        reply = dns_answer(query, {GVISOR_STAND_IN!r})
        if reply is not None:
            try:
                dns.sendto(reply, peer)
            except OSError:
                pass
def serve_transparent(made, target):
    *listeners, dns = made
    for listener in listeners:
        preamble = {RELAYED!r} + listener.getsockname()[1].to_bytes(2, "big")
        threading.Thread(target=forward, args=(listener, target, preamble), daemon=True).start()
    threading.Thread(target=answer_names, args=(dns,), daemon=True).start()
"""
)
"""Python for the egress relay inside a gVisor sandbox, after `_unix_server.RELAY`:
``open_transparent()`` binds the transparent path's sockets (none if the Sentry refuses one: then
clients that ignore the proxy variables find no route, as before), ``serve_transparent(made,
target)`` answers names and relays connections to the proxy's socket ``target``."""


__all__ = [
    "GVISOR_STAND_IN",
    "PORTS",
    "RELAYED",
    "SANDBOX_LISTENERS",
    "STAND_IN",
    "DnsResponder",
    "TransparentPath",
    "dns_answer",
    "open_listeners",
]
