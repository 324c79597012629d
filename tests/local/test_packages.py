"""Installing packages into a local session, offline, from a wheel the test builds itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from langchain_sandbox.errors import InvalidPackageNameError
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.local import LocalProvider, PackageIndex


@pytest.fixture
async def offline_provider(
    tmp_path: Path, build_wheel: Callable[..., Path]
) -> AsyncIterator[LocalProvider]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "tinypkg", "0.1", "VALUE = 'installed'\n")
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        package_index=PackageIndex(find_links=(wheels,), no_index=True),
    )
    try:
        yield provider
    finally:
        await provider.aclose()


async def test_installed_package_is_importable_in_the_same_session(
    offline_provider: LocalProvider,
) -> None:
    async with await offline_provider.create() as session:
        before = await session.run_code("import tinypkg")
        assert before.error is not None
        assert before.error.name == "ModuleNotFoundError"
        installed = await session.install_packages(["tinypkg==0.1"], timeout=300)
        assert installed.ok, installed.render()
        assert any("tinypkg" in notice for notice in installed.notices)
        after = await session.run_code("import tinypkg\ntinypkg.VALUE")
        assert after.value == repr("installed")
        shell = await session.run_command("python -c 'import tinypkg; print(tinypkg.VALUE)'")
        assert shell.stdout == "installed\n"
        # The worker itself stays offline: installing opened the network for pip only.
        offline = await session.run_code(
            "import socket\ntry:\n    socket.getaddrinfo('example.com', 443)\n    r = 'online'\n"
            "except OSError:\n    r = 'offline'\nr"
        )
        assert offline.value == repr("offline")


async def test_packages_in_the_spec_are_installed_at_create(
    offline_provider: LocalProvider,
) -> None:
    async with await offline_provider.create(SessionSpec(packages=("tinypkg",))) as session:
        assert (await session.run_code("import tinypkg\ntinypkg.VALUE")).value == repr("installed")


async def test_a_package_that_is_not_there_fails_as_a_result(
    offline_provider: LocalProvider,
) -> None:
    async with await offline_provider.create() as session:
        result = await session.install_packages(["no-such-package-here"], timeout=300)
        assert not result.ok
        assert "no-such-package-here" in result.stderr + result.stdout


_HOSTILE = [
    "--index-url x",
    "--index-url=http://evil.example",
    "; rm -rf /",
    "numpy; rm -rf /",
    "$(id)",
    "`id`",
    "http://evil.example/pkg.whl",
    "/tmp/pkg.whl",
    "./pkg",
    "../pkg",
    "pkg --target /",
    "-e .",
    "",
]


async def test_hostile_names_are_refused(offline_provider: LocalProvider) -> None:
    async with await offline_provider.create() as session:
        for hostile in _HOSTILE:
            with pytest.raises(InvalidPackageNameError):
                await session.install_packages([hostile])
            with pytest.raises(InvalidPackageNameError):
                await session.install_packages(["tinypkg", hostile])
        listing = await session.list_files(".packages")
        assert listing == []
        assert (await session.run_code("1 + 1")).value == "2"
