"""``install_packages`` under a network policy, for real on both isolation levels: pip reaches the
application's index only when the policy allows the index's host and port too, and a policy that
does not name it leaves pip with no way to the index (the host's index proxy refuses it).
The index is ``test_pip_install``'s: a PEP 503 page and a wheel on the host's loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

from langchain_sandbox import NetworkPolicy, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession, PackageIndex
from security.test_pip_install import index_root, index_url


@contextlib.asynccontextmanager
async def _session(
    tmp_path: Path, index_url: str, isolation: str, allow: list[str]
) -> AsyncIterator[LocalSession]:
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        package_index=PackageIndex(index_url=index_url),
        isolation=isolation,
    )
    try:
        async with await provider.create(SessionSpec(network=NetworkPolicy(allow=allow))) as made:
            yield made
    finally:
        await provider.aclose()


async def test_a_policy_that_allows_the_index_installs(
    tmp_path: Path, index_url: str, isolation: str
) -> None:
    index = urlsplit(index_url).netloc
    async with _session(tmp_path, index_url, isolation, [index]) as session:
        installed = await session.install_packages(["tinypkg"], timeout=300)
        assert installed.ok, installed.render()
        imported = await session.run_code("import tinypkg\ntinypkg.VALUE")
    assert imported.value == repr("from the index")


async def test_a_policy_without_the_index_cannot_install(
    tmp_path: Path, index_url: str, isolation: str
) -> None:
    index = urlsplit(index_url).netloc
    async with _session(tmp_path, index_url, isolation, ["pypi.org", "files.pythonhosted.org"]) as (
        session
    ):
        refused = await session.install_packages(["tinypkg"], timeout=300)
        imported = await session.run_code("import tinypkg")
    assert not refused.ok, refused.render()
    assert any(index in notice and "network policy" in notice for notice in refused.notices), (
        refused.notices
    )
    assert imported.error is not None
    assert imported.error.name == "ModuleNotFoundError"


__all__ = ["index_root", "index_url"]
