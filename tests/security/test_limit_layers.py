"""Each resource limit of the local provider proven on its own: the exhaustion it stops, run with
that one limit left out, succeeds; with the limit in place it fails. The runs start bwrap as the
launcher does (``test_layers.py``'s command line) and, for the cgroup limits, join a session
cgroup of ``_cgroups.py`` first, exactly as the launcher's ``join_command`` prefix does; without
the limit the same command runs outside any session cgroup (and without the rlimit fallback,
which is its own mechanism). ``README.md`` lists the limits and their tests;
``test_every_limit_has_a_row`` holds the rows against the tests here. The output cap and the
wall-time, limits a caller sets, are shown through a real session with the limit below and above
what the call needs.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.providers.local._bubblewrap import (
    bubblewrap_argv,
    find_bubblewrap,
    options_via_fd,
)
from langchain_sandbox.providers.local._cgroups import SessionCgroup, detect_cgroups
from security.test_layers import PYTHON, README, _argv, _run

_ROW = re.compile(r"^\| limit `(?P<limit>[^`]+)` \| (?P<how>[^|]+) \| (?P<test>[^|]+) \|$")
LIMITS = {
    match["limit"]: match["test"].strip()
    for line in README.read_text().splitlines()
    if (match := _ROW.match(line.strip()))
}
_TMP_BYTES = 1024 * 1024


def test_every_limit_has_a_row() -> None:
    assert {"tmp-size", "memory-cgroup", "pids-cgroup", "output-cap", "wall-time"} == set(LIMITS)
    for limit, test in LIMITS.items():
        assert test == "none yet" or test in globals(), f"{limit}: no test {test!r} here"


@pytest.mark.parametrize("layer_on", [True, False], ids=["tmp-size", "without-tmp-size"])
def test_the_tmp_size_alone_keeps_the_sandbox_from_filling_memory_through_tmp(
    tmp_path: Path, layer_on: bool
) -> None:
    """``/tmp`` is a tmpfs (memory): with ``--size`` a 2 MiB write to a 1 MiB ``/tmp`` fails
    (ENOSPC); without it, it fills."""
    fill = "head -c 2097152 /dev/zero > /tmp/fill && echo filled"
    argv = bubblewrap_argv(
        find_bubblewrap(),
        ["/bin/sh", "-c", fill],
        python=PYTHON,
        workspace=str(tmp_path),
        files={},
        env={"PATH": "/usr/bin:/bin"},
        network=False,
        tmp_size_bytes=_TMP_BYTES,
    )
    size = ["--size", str(_TMP_BYTES), "--tmpfs", "/tmp"]
    start = next(i for i in range(len(argv)) if argv[i : i + 4] == size)
    if not layer_on:
        argv = argv[:start] + argv[start + 2 :]
    done = _run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == ("" if layer_on else "filled\n"), done
    if layer_on:
        assert "No space left on device" in done.stderr, done


@pytest.fixture
def cgroup(request: pytest.FixtureRequest) -> Iterator[SessionCgroup]:
    """A session cgroup with the limit ``request.param`` names, removed afterwards."""
    support = detect_cgroups()
    memory, processes = (64 * 1024 * 1024, None) if request.param == "memory" else (None, 32)
    group = SessionCgroup.create(
        support, f"layer-test-{uuid.uuid4().hex[:8]}", memory_bytes=memory, max_processes=processes
    )
    wanted = "memory" if request.param == "memory" else "pids"
    if wanted not in group.directories:
        group.remove()
        pytest.skip(f"no {wanted} cgroup can be made here: {support.reason}")
    try:
        yield group
    finally:
        group.remove()


def _run_in(cgroup: SessionCgroup | None, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a bwrap command line as the launcher does, in ``cgroup`` (joined first) or in none."""
    with options_via_fd(argv) as (short, fds):
        command = cgroup.join_command(short) if cgroup is not None else short
        return subprocess.run(command, pass_fds=fds, capture_output=True, text=True, timeout=120)


_ALLOCATE = (
    "import sys\n"
    "chunks = [bytearray(16 * 1024 * 1024) for _ in range(16)]\n"  # 256 MiB, every page touched
    "print('allocated', sum(map(len, chunks)) >> 20)\n"
)


@pytest.mark.parametrize("cgroup", ["memory"], indirect=True)
@pytest.mark.parametrize("layer_on", [True, False], ids=["memory-cgroup", "without-memory-cgroup"])
def test_the_memory_cgroup_alone_stops_code_that_allocates_past_its_limit(
    tmp_path: Path, cgroup: SessionCgroup, layer_on: bool
) -> None:
    """256 MiB allocated under a 64 MiB memory cgroup: killed by the kernel (an OOM kill counted
    in the session's cgroup); outside it, the allocation succeeds."""
    argv = _argv(tmp_path, [PYTHON.sandbox_executable(), "-c", _ALLOCATE])
    done = _run_in(cgroup if layer_on else None, argv)
    if layer_on:
        assert done.returncode != 0, done
        assert done.stdout == "", done
        assert cgroup.oom_kills() >= 1
    else:
        assert done.stdout == "allocated 256\n", done


_SPAWN = (
    "import subprocess\n"
    "children = []\n"
    "try:\n"
    "    for _ in range(64):\n"
    "        children.append(subprocess.Popen(['sleep', '30']))\n"
    "    print('started', len(children))\n"
    "except OSError as exc:\n"
    "    print('refused after', len(children), exc.errno)\n"
    "for child in children:\n"
    "    child.kill()\n"
)


@pytest.mark.parametrize("cgroup", ["pids"], indirect=True)
@pytest.mark.parametrize("layer_on", [True, False], ids=["pids-cgroup", "without-pids-cgroup"])
def test_the_pids_cgroup_alone_stops_code_that_starts_processes_past_its_limit(
    tmp_path: Path, cgroup: SessionCgroup, layer_on: bool
) -> None:
    """64 processes started under a 32-process pids cgroup: the fork past the limit fails
    (EAGAIN); outside it, all start. (``RLIMIT_NPROC``, the fallback, is not set here.)"""
    argv = _argv(tmp_path, [PYTHON.sandbox_executable(), "-c", _SPAWN])
    done = _run_in(cgroup if layer_on else None, argv)
    if layer_on:
        assert done.stdout.startswith("refused after"), done
        assert done.stdout.endswith(" 11\n"), done  # EAGAIN
    else:
        assert done.stdout == "started 64\n", done


@pytest.mark.parametrize("layer_on", [True, False], ids=["output-cap", "without-output-cap"])
async def test_the_output_cap_alone_keeps_a_flood_of_output_out_of_the_result(
    provider: LocalProvider, layer_on: bool
) -> None:
    """100 kB printed under a 10 kB cap: the result keeps head and tail and says what it left
    out; with the cap above the output (the limit turned off for this call's size), all of it."""
    cap = 10_000 if layer_on else 1_000_000
    spec = SessionSpec(limits=Limits(max_output_bytes=cap, timeout=60.0))
    async with await provider.create(spec) as session:
        result = await session.run_code("print('x' * 100_000)")
    assert result.ok, result.render()[:500]
    assert result.truncated is layer_on
    assert (len(result.stdout) < 30_000) is layer_on, len(result.stdout)
    if not layer_on:
        assert result.stdout == "x" * 100_000 + "\n"


@pytest.mark.parametrize("layer_on", [True, False], ids=["wall-time", "without-wall-time"])
async def test_the_wall_time_alone_stops_a_call_that_runs_past_it(
    provider: LocalProvider, layer_on: bool
) -> None:
    """A command sleeping 2 s under a 1 s timeout is killed and reported as timed out; under a
    30 s one (the limit turned off for it) it finishes."""
    async with await provider.create(SessionSpec()) as session:
        result = await session.run_command(
            "sleep 2; echo finished", timeout=1.0 if layer_on else 30.0
        )
    assert result.timed_out is layer_on, result.render()[:500]
    assert result.stdout == ("" if layer_on else "finished\n"), result.render()[:500]
