"""Sandbox environments: built once, offline from a wheel directory, shared between processes,
selected by name, and the only packages a session can import (the host's venv is not)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_sandbox import SandboxExecTool, SandboxRuntime, cli
from langchain_sandbox.errors import EnvironmentBuildError, InvalidInputError
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, PackageIndex, SandboxEnvironment

pytestmark = pytest.mark.slow


def _directories(cache: Path) -> list[Path]:
    """The directories of an environments cache but the worker's bytecode kept beside them."""
    return [p for p in cache.iterdir() if p.is_dir() and p.name != ".bytecode"]


@pytest.fixture
def wheels(tmp_path: Path, build_wheel: Callable[..., Path]) -> Path:
    """A directory holding one tiny wheel, ``tinypkg`` 1.0."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    build_wheel(directory, "tinypkg", "1.0", "VALUE = 42\n")
    return directory


def tiny_environment(wheels: Path, name: str = "tiny") -> SandboxEnvironment:
    return SandboxEnvironment(
        name, ["tinypkg==1.0"], PackageIndex(find_links=(wheels,), no_index=True)
    )


SPEC = SessionSpec(template="tiny", limits=Limits(timeout=60.0))


async def test_offline_build_from_a_wheel_dir_then_reuse(tmp_path: Path, wheels: Path) -> None:
    environment = tiny_environment(wheels)
    lines: list[str] = []
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        environments=[environment],
        environments_dir=tmp_path / "environments",
        progress=lines.append,
    )
    try:
        async with await provider.create(SPEC) as session:
            result = await session.run_code(
                "import importlib.util, tinypkg\n"
                "missing = [m for m in ('numpy', 'langchain_core', 'pydantic', 'langchain_sandbox')"
                " if importlib.util.find_spec(m) is not None]\n"
                "(tinypkg.VALUE, tinypkg.__file__, missing)"
            )
            assert result.error is None, result.render()
            assert result.value == (
                "(42, '/opt/environment/lib/python3.11/site-packages/tinypkg/__init__.py', [])"
            ).replace("3.11", f"{sys.version_info[0]}.{sys.version_info[1]}")
    finally:
        await provider.aclose()
    assert any(line.startswith("building sandbox environment 'tiny'") for line in lines)
    assert any("Successfully installed tinypkg-1.0" in line for line in lines)
    built = _directories(tmp_path / "environments")
    assert [p.name.startswith(".build-") for p in built] == [False]  # nothing left half-built

    # A second provider (another process would do the same) reuses it without building.
    again: list[str] = []
    second = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        environments=[environment],
        environments_dir=tmp_path / "environments",
        progress=again.append,
    )
    try:
        statuses = {s.name: s for s in await second.environment_statuses()}
        assert statuses["tiny"].built
        assert statuses["tiny"].path == built[0]
        assert statuses["tiny"].inputs["requirements"] == ["tinypkg==1.0"]
        assert (statuses["tiny"].size_bytes or 0) > 0
        async with await second.create(SPEC) as session:
            assert (await session.run_code("import tinypkg; tinypkg.VALUE")).value == "42"
    finally:
        await second.aclose()
    assert again == []


async def test_unisolated_sessions_use_an_environment_built_on_the_host(
    tmp_path: Path, wheels: Path
) -> None:
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        isolation="none",
        environments=[tiny_environment(wheels)],
        environments_dir=tmp_path / "environments",
        progress=lambda line: None,
    )
    try:
        with pytest.warns(RuntimeWarning, match="directly on this machine"):
            session = await provider.create(SPEC)
        async with session:
            result = await session.run_code(
                "import importlib.util, tinypkg\n"
                "(tinypkg.VALUE, importlib.util.find_spec('langchain_core') is None)"
            )
        assert result.value == "(42, True)"
        (built,) = _directories(tmp_path / "environments")
        assert tinypkg_file(built).is_file()
    finally:
        await provider.aclose()


def tinypkg_file(environment: Path) -> Path:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return environment / "lib" / f"python{version}" / "site-packages" / "tinypkg" / "__init__.py"


async def test_inputs_address_the_environment(tmp_path: Path, wheels: Path) -> None:
    provider = LocalProvider(
        environments=[
            tiny_environment(wheels),
            SandboxEnvironment("same", ["tinypkg==1.0"], tiny_environment(tmp_path).package_index),
            SandboxEnvironment("other", ["tinypkg>=1"], tiny_environment(tmp_path).package_index),
        ],
        environments_dir=tmp_path / "environments",
    )
    statuses = {s.name: s for s in await provider.environment_statuses()}
    assert not any(s.built for s in statuses.values())
    # Another wheel directory is another input; other requirements are another environment.
    assert len({statuses[n].key for n in ("tiny", "same", "other", "default")}) == 4
    assert statuses["default"].inputs["requirements"] == [
        "numpy>=1.26,<3",
        "pandas>=2.2,<3",
        "matplotlib>=3.8,<4",
    ]
    assert statuses["default"].inputs["python_build"] == sys.version


def test_two_processes_build_once(tmp_path: Path, wheels: Path) -> None:
    """While one process builds, another asking for the same environment waits and reuses it."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from langchain_sandbox.providers.local import LocalProvider, PackageIndex, SandboxEnvironment
        env = SandboxEnvironment("tiny", ["tinypkg==1.0"],
                                 PackageIndex(find_links=({str(wheels)!r},), no_index=True))
        provider = LocalProvider(environments=[env], environments_dir={str(tmp_path / "envs")!r},
                                 progress=lambda line: print(line, flush=True))
        status = asyncio.run(provider.prepare_environment("tiny"))
        print("RESULT", status.built_now, status.path, flush=True)
        """
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert first.stdout is not None
    first_lines = [first.stdout.readline()]
    assert first_lines[0].startswith("building sandbox environment 'tiny'"), first_lines
    # The first process holds the lock and is building now: the second must wait for it.
    second = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True
    )
    first_lines += first.stdout.readlines()
    assert first.wait(timeout=600) == 0
    first_result = [line for line in first_lines if line.startswith("RESULT")]
    second_lines = second.stdout.splitlines()
    assert second_lines[0] == "waiting for another process that is building environment 'tiny'"
    assert not any(line.startswith("building") for line in second_lines)
    path = first_result[0].split()[2]
    assert first_result == [f"RESULT True {path}\n"]
    assert second_lines[-1] == f"RESULT False {path}"
    assert sorted(p.name for p in (tmp_path / "envs").iterdir() if not p.name.startswith(".")) == [
        Path(path).name,
        Path(path).name + ".json",
    ]


async def test_unreachable_index_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    unreachable = SandboxEnvironment(
        "remote", ["tinypkg"], PackageIndex(index_url="http://127.0.0.1:9/simple")
    )
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        environments=[unreachable],
        environments_dir=tmp_path / "environments",
        progress=lambda line: None,
    )
    try:
        with pytest.raises(EnvironmentBuildError) as caught:
            await provider.create(SessionSpec(template="remote"))
        message = str(caught.value)
        assert (
            "Building sandbox environment 'remote' failed: pip could not reach a package index"
            in message
        )
        assert "PackageIndex(find_links=['/path/to/wheels'], no_index=True)" in message
        assert list((tmp_path / "environments").glob("[!.]*")) == []
        assert list((tmp_path / "environments").glob(".build-*")) == []
        assert not (tmp_path / "sandboxes" / "sessions").exists()  # no session was started
    finally:
        await provider.aclose()


def test_a_failed_build_reaches_the_developer_not_the_model(tmp_path: Path) -> None:
    unreachable = SandboxEnvironment(
        "remote", ["tinypkg"], PackageIndex(index_url="http://127.0.0.1:9/simple")
    )
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        environments=[unreachable],
        environments_dir=tmp_path / "environments",
        progress=lambda line: None,
    )
    runtime = SandboxRuntime(provider, spec=SessionSpec(template="remote"))
    try:
        # The model cannot fix the application's environment: no tool text, an exception.
        with pytest.raises(EnvironmentBuildError, match="could not reach a package index"):
            SandboxExecTool(runtime=runtime).invoke({"code": "1 + 1"})
    finally:
        runtime.close()


async def test_unknown_or_reserved_names_are_refused(tmp_path: Path) -> None:
    provider = LocalProvider(base_dir=tmp_path, environments_dir=tmp_path / "environments")
    with pytest.raises(
        InvalidInputError, match=r"no sandbox environment 'gpu' \(known: 'default', 'host'\)"
    ):
        await provider.create(SessionSpec(template="gpu"))
    with pytest.raises(InvalidInputError, match="reserved"):
        SandboxEnvironment("host", ["numpy"])
    with pytest.raises(InvalidInputError, match="not a package requirement"):
        SandboxEnvironment("bad", ["numpy; rm -rf /"])
    with pytest.raises(InvalidInputError, match="not an environment name"):
        SandboxEnvironment("../up", [])


async def test_default_environment_has_the_data_stack_and_not_the_hosts_packages(
    tmp_path: Path,
) -> None:
    provider = LocalProvider(base_dir=tmp_path)
    probe = (
        "import importlib.util\n"
        "mods = ('numpy', 'pandas', 'matplotlib', 'langchain_core', 'langgraph', 'psycopg',"
        " 'langchain_sandbox', 'pytest')\n"
        "{m: importlib.util.find_spec(m) is not None for m in mods}"
    )
    try:
        async with await provider.create(SessionSpec(limits=Limits(timeout=60.0))) as session:
            result = await session.run_code(probe)
        assert result.value == (
            "{'numpy': True, 'pandas': True, 'matplotlib': True, 'langchain_core': False, "
            "'langgraph': False, 'psycopg': False, 'langchain_sandbox': False, 'pytest': False}"
        )
        # The host's own packages only when the application asks for them by name.
        async with await provider.create(SessionSpec(template="host")) as session:
            host = await session.run_code("import langchain_core; langchain_core.__name__")
        assert host.value == "'langchain_core'"
    finally:
        await provider.aclose()


def test_doctor_lists_the_environments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["doctor"])
    out = capsys.readouterr().out
    section = out[out.index("sandbox environments") :]
    assert "default" in section
    assert "numpy>=1.26,<3 pandas>=2.2,<3 matplotlib>=3.8,<4" in section
    assert "built" in section


def test_an_environment_extends_the_default_with_its_constraints() -> None:
    from langchain_sandbox.providers.local.environments import DEFAULT_REQUIREMENTS

    analysis = SandboxEnvironment("analysis", ["scipy", "pandas"], extends="default")
    # The default's requirements, pandas>=2.2,<3 among them, are resolved with the new ones.
    assert analysis.requirements == (*DEFAULT_REQUIREMENTS, "scipy", "pandas")
    assert analysis.extends == "default"
    with pytest.raises(InvalidInputError, match="extends must be"):
        SandboxEnvironment("odd", ["scipy"], extends="nonexistent")


async def test_a_child_environment_has_its_parents_packages(
    tmp_path: Path, wheels: Path, build_wheel: Callable[..., Path]
) -> None:
    build_wheel(wheels, "otherpkg", "1.0", "VALUE = 7\n")
    parent = tiny_environment(wheels, "base")
    child = SandboxEnvironment("child", ["otherpkg==1.0"], extends=parent)
    assert child.package_index == parent.package_index  # inherited: builds offline too
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        environments=[parent, child],
        environments_dir=tmp_path / "environments",
        progress=lambda line: None,
    )
    try:
        spec = SessionSpec(template="child", limits=Limits(timeout=60.0))
        async with await provider.create(spec) as session:
            result = await session.run_code(
                "import tinypkg, otherpkg\n(tinypkg.VALUE, otherpkg.VALUE)"
            )
            assert result.error is None, result.render()
            assert result.value == "(42, 7)"
    finally:
        await provider.aclose()
