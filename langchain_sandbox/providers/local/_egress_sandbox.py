"""The sandbox's side of a session's network policy: where the egress proxy appears inside, the
relay that reaches it, and the variables that point clients at it.

Clients that read the proxy variables (pip, requests, httpx, urllib, curl, git, npm) reach the
proxy at ``127.0.0.1:EGRESS_PORT``. Anything that ignores them has no route (the sandbox's network
namespace holds only its own loopback) except the transparent path for names
(`_egress_transparent`): it fails instead of going around the policy.
"""

from __future__ import annotations

from langchain_sandbox.network import NetworkPolicy, ip_literal
from langchain_sandbox.providers.local._egress_transparent import SANDBOX_LISTENERS
from langchain_sandbox.providers.local._unix_server import RELAY

EGRESS_DIR = "/opt/egress"
"""Where the proxy's socket and the session CA's certificate appear inside the sandbox."""

EGRESS_PORT = 3128
"""The port of the proxy's relay on the sandbox's loopback."""

TRANSPARENT = "--transparent"
"""`EGRESS_FORWARDER`'s option (before the command) that opens the transparent path's listeners
inside the sandbox too (gVisor's: `_egress_transparent.SANDBOX_LISTENERS`)."""

EGRESS_FORWARDER = (
    "from __future__ import annotations\n"
    + RELAY
    + SANDBOX_LISTENERS
    + "target, command = sys.argv[1], sys.argv[2:]\n"
    f"made = open_transparent() if command[0] == {TRANSPARENT!r} else []\n"
    f"command = command[1:] if command[0] == {TRANSPARENT!r} else command\n"
    f"listener = socket.create_server(('127.0.0.1', {EGRESS_PORT}))\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    null = os.open(os.devnull, os.O_RDWR)\n"
    "    for fd in (0, 1, 2):\n"
    "        os.dup2(null, fd)\n"
    "    low = 3\n"
    "    for keep in sorted([listener.fileno(), *(s.fileno() for s in made)]):\n"
    "        os.closerange(low, keep)\n"
    "        low = keep + 1\n"
    "    os.closerange(low, 65536)\n"
    "    if made:\n"
    "        serve_transparent(made, target)\n"
    "    forward(listener, target)\n"
    "listener.close()\n"
    "for s in made:\n"
    "    s.close()\n"
    "os.execv(command[0], command)\n"
)
"""Python that starts a session's worker (``argv[2:]``) with the relay to the proxy's socket
(``argv[1]``) running beside it in the same sandbox: a forked process holding only the listener
(and, after `TRANSPARENT`, the transparent path's sockets; not the worker's channels, so the host
still sees the worker end), in a session of its own (the worker ends what a cell leaves in its
process group). It dies with the sandbox. Every socket is bound before the worker starts."""

EGRESS_SOCKET = f"{EGRESS_DIR}/proxy.sock"
"""The proxy's unix socket inside the sandbox."""

CA_FILE = "ca.pem"
"""The session CA's certificate, in the egress directory (the only CA the sandbox trusts)."""


def egress_env(policy: NetworkPolicy) -> dict[str, str]:
    """The variables that send the sandbox's HTTP(S) clients through the proxy and make them
    trust the session's CA.

    The sandbox's own loopback stays direct (``NO_PROXY``), except a loopback address the policy
    allows: that entry names the host's (a local service the code may call), so requests to it
    go to the proxy; ``localhost`` still reaches the sandbox's own servers.
    """
    proxy = f"http://127.0.0.1:{EGRESS_PORT}"
    ca = f"{EGRESS_DIR}/{CA_FILE}"
    env = {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    env.update({name.lower(): value for name, value in env.items()})
    allowed = {ip_literal(host) for host, _ in policy.entries}
    direct = ["localhost", *(a for a in ("127.0.0.1", "::1") if ip_literal(a) not in allowed)]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(direct)
    for name in (
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
    ):
        env[name] = ca
    return env


__all__ = [
    "CA_FILE",
    "EGRESS_DIR",
    "EGRESS_FORWARDER",
    "EGRESS_PORT",
    "EGRESS_SOCKET",
    "TRANSPARENT",
    "egress_env",
]
