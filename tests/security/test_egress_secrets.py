"""A secret's value reaches the upstream host it is bound to and nothing else: not the sandbox
(its environment, files, processes), not the session's files on the host, its record, a
snapshot of its workspace and variables, a log, a repr or an error message. Run for real on both
isolation levels (loopback upstreams from ``egress_servers``)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, serve_upstreams

from langchain_sandbox import (
    ConfigurationError,
    InvalidInputError,
    Limits,
    NetworkPolicy,
    Secret,
    SessionSpec,
)
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

VALUE = "sk-live-0123456789-never-in-the-sandbox"


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test",))


@pytest.fixture
async def provider(
    tmp_path: Path, upstreams: Upstreams, isolation: str
) -> AsyncIterator[LocalProvider]:
    made = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        isolation=isolation,
        egress_upstream=EgressUpstream(ca_file=upstreams.ca_file, hosts={"api.test": "127.0.0.1"}),
    )
    try:
        yield made
    finally:
        await made.aclose()


def files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


async def test_the_value_stays_on_the_host(
    provider: LocalProvider,
    upstreams: Upstreams,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = Secret("API_KEY", VALUE, hosts=[f"api.test:{upstreams.https_port}"])
    policy = NetworkPolicy(
        allow=[f"api.test:{upstreams.https_port}", f"127.0.0.1:{upstreams.https_port}"],
        secrets=[secret],
    )
    # Reading every file the sandbox can see (the whole Python install under /opt included) takes
    # gVisor's gofer most of a minute on a loaded machine: the limit is for that, not the request.
    spec = SessionSpec(network=policy, limits=Limits(timeout=240))
    session = await provider.create(spec)
    url = f"https://api.test:{upstreams.https_port}/use"
    code = f"""
import os, pathlib, subprocess, urllib.request
key = os.environ["API_KEY"]
request = urllib.request.Request({url!r}, headers={{"Authorization": "Bearer " + key}})
status = urllib.request.urlopen(request, timeout=20).status
pathlib.Path("env.txt").write_text(repr(dict(os.environ)))
environs = subprocess.run(
    "cat /proc/[0-9]*/environ", shell=True, capture_output=True
).stdout
found = subprocess.run(
    ["grep", "-rlF", {VALUE!r}, "/home/user", "/tmp", "/opt", "/etc"],
    capture_output=True, text=True, env={{"LC_ALL": "C"}},
).stdout
print(status, key == {secret.placeholder!r}, {VALUE.encode()!r} in environs, repr(found))
"""
    try:
        result = await session.run_code(code)
        assert result.ok, result.render()
        # The upstream got the value; the sandbox saw the placeholder, in no environment of any
        # of its processes and in no file it can read.
        assert upstreams.seen[0].headers["authorization"] == f"Bearer {VALUE}"
        assert result.stdout.split() == ["200", "True", "False", "''"], result.stdout
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        await Snapshotter(store).capture(session)
        record = json.dumps(session.record)
        assert VALUE not in record
        assert json.loads(record)["state"]["network"]["secrets"] == [
            {"name": "API_KEY", "hosts": [f"api.test:{upstreams.https_port}"]}
        ]
        reprs = repr(spec) + repr(policy) + repr(secret) + str(session.launcher)
    finally:
        await session.close()
    assert VALUE not in reprs
    assert files_holding(tmp_path / "blobs", VALUE.encode()) == []
    assert files_holding(tmp_path / "blobs", secret.placeholder.encode()) != []  # env.txt
    assert files_holding(tmp_path / "sandboxes", VALUE.encode()) == []
    assert VALUE not in caplog.text


def test_a_policy_restored_from_a_record_needs_the_value_again() -> None:
    policy = NetworkPolicy(allow=["api.test"], secrets=[Secret("API_KEY", VALUE, ["api.test"])])
    record = json.loads(json.dumps(policy.record()))
    assert VALUE not in json.dumps(record)
    with pytest.raises(ConfigurationError, match="API_KEY"):
        NetworkPolicy.from_record(record, {})
    assert NetworkPolicy.from_record(record, {"API_KEY": VALUE}) == policy


def test_bad_secrets_are_refused_without_quoting_the_value() -> None:
    with pytest.raises(InvalidInputError) as caught:
        Secret("API_KEY", VALUE + "\r\nX-Injected: 1", ["api.test"])
    assert VALUE not in str(caught.value)
    with pytest.raises(InvalidInputError, match="no host"):
        Secret("API_KEY", VALUE, [])
    with pytest.raises(InvalidInputError, match="identifier"):
        Secret("API KEY", VALUE, ["api.test"])
