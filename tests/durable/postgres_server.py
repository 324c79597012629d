"""A throwaway PostgreSQL server for the durable-session tests, started from the server binaries.

The tests need a real Postgres (``langgraph-checkpoint-postgres`` against a real server, several
worker processes sharing it), and no network but loopback: so the run starts its own server, on
127.0.0.1 with a free port, with its data directory in a temporary directory, and stops it at the
end. Postgres refuses to run as root; as root, the server runs as the ``postgres`` system user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from served_port import free_port

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found. The durable-session tests start "
    "a real local server; install it (Debian/Ubuntu: apt-get install postgresql; .ci/run does)."
)


def find_bindir() -> Path | None:
    """Directory holding ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, the Debian layout, PATH."""
    candidates: list[str] = []
    if pg_config := shutil.which("pg_config"):
        result = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        )
        candidates.append(result.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if initdb := shutil.which("initdb"):
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        if candidate and all((Path(candidate) / tool).is_file() for tool in ("initdb", "pg_ctl")):
            return Path(candidate)
    return None


@dataclass
class PostgresServer:
    """A running server; :attr:`dsn` connects as the superuser ``postgres`` (trust auth, loopback)."""

    bindir: Path
    root: Path
    port: int
    _as_user: list[str]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?sslmode=disable"

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as_user, *args], check=True, capture_output=True, text=True, timeout=120
        )

    @classmethod
    def start(cls, bindir: Path) -> PostgresServer:
        root = Path(tempfile.mkdtemp(prefix="lcsb-pg-"))
        as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(root, user.pw_uid, user.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        server = cls(bindir=bindir, root=root, port=free_port(), _as_user=as_user)
        data = root / "data"
        server._run(
            str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        # The free port is only free when asked: another xdist worker's server (or any process)
        # may take it before this one binds it, so a lost race tries another port.
        for _ in range(4):
            try:
                server.resume()
                return server
            except subprocess.CalledProcessError:
                if "Address already in use" not in server.log_tail(5):
                    raise
                server.port = free_port()
        server.resume()
        return server

    def pause(self) -> None:
        """Stop the server but keep its data, as an outage does (:meth:`resume` ends it)."""
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"
        )

    def resume(self) -> None:
        """Start the server (again, after :meth:`pause`: same port, same data)."""
        # Durability of the test cluster itself does not matter; speed on a shared machine does.
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-l", str(self.root / "log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self) -> None:
        try:
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
            )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        log = self.root / "log"
        return (
            "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""
        )
