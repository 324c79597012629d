"""The one network-denial probe of the suite: a port on the host that a sandbox tries to reach."""

from __future__ import annotations

import socket


class LoopbackListener:
    """A TCP port on the host's 127.0.0.1 for network-denial probes, answered without waiting.

    It listens and never accepts: a connection from a sandbox completes into the listen backlog
    (the kernel does the handshake), so once the sandbox's probe has returned, a non-blocking
    ``accept`` tells at once whether anything arrived. A sandbox without network is refused at
    once, so neither side waits out a timeout.
    """

    PROBE = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=16)
        self._server.setblocking(False)
        self.port: int = self._server.getsockname()[1]

    @property
    def probe(self) -> str:
        """Python for the sandbox: prints ``connected`` or ``refused <error type>``."""
        return self.PROBE.format(port=self.port)

    def reached(self) -> bool:
        """Whether any connection arrived since the last call (call it after the probe ran)."""
        arrived = False
        while True:
            try:
                connection, _ = self._server.accept()
            except BlockingIOError:
                return arrived
            connection.close()
            arrived = True

    def close(self) -> None:
        self._server.close()
