"""A thread on the Kubernetes provider across processes (each runtime with its own provider, as
another worker would have): it attaches to the live pod, and resumes on a new pod, with its files
and variables, when its pod was deleted or its claim is gone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from emulated_providers import new_emulator

from langchain_sandbox.errors import SandboxGoneError
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

_SETUP = "value = 7\nopen('notes.txt', 'w').write('kept')"
_CHECK = "print(value, open('notes.txt').read())"


@pytest.fixture
def cluster() -> Iterator[KubernetesEmulator]:
    with new_emulator("kubernetes") as running:
        assert isinstance(running, KubernetesEmulator)
        yield running


@pytest.fixture
def runtimes(cluster: KubernetesEmulator, tmp_path: Path) -> Iterator[Callable[[], SandboxRuntime]]:
    """Runtimes on the cluster, each with its own provider (as another worker would have), one
    snapshot store between them; all closed at the end."""
    made: list[SandboxRuntime] = []

    def new() -> SandboxRuntime:
        made.append(
            SandboxRuntime(
                cluster.provider(),
                snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "b")),
                persist="every_call",
            )
        )
        return made[-1]

    yield new
    for runtime in made:
        runtime.close()


@pytest.fixture
def set_up(
    runtimes: Callable[[], SandboxRuntime],
) -> tuple[SandboxRuntime, SandboxRuntime, dict[str, Any]]:
    """Two runtimes, the first with thread ``t`` set up (a variable and a file) and its snapshot
    written; and the record that call left."""
    first, second = runtimes(), runtimes()
    record = first.run_code("t", _SETUP).record
    first.flush()  # the snapshot written behind the call is complete before the pod goes
    return first, second, record


def test_another_runtime_attaches_to_the_live_pod(
    set_up: tuple[SandboxRuntime, SandboxRuntime, dict[str, Any]],
) -> None:
    _, second, record = set_up
    outcome = second.run_code("t", _CHECK, record=record)
    assert outcome.value.stdout.split() == ["7", "kept"]
    assert not outcome.value.notices, "attached, nothing restored"
    assert outcome.record["session"]["sandbox_id"] == record["session"]["sandbox_id"]


def test_a_thread_whose_pod_was_deleted_resumes_on_a_new_pod(
    cluster: KubernetesEmulator, set_up: tuple[SandboxRuntime, SandboxRuntime, dict[str, Any]]
) -> None:
    _, second, record = set_up
    sandbox = cluster.sandbox_of(record["session"]["sandbox_id"])
    old_pod = cluster.cluster.pod("default", sandbox)
    cluster.restart_pod(sandbox)
    new_pod = cluster.cluster.pod("default", sandbox)
    assert old_pod is not None
    assert new_pod is not None
    assert new_pod.ip != old_pod.ip

    outcome = second.run_code("t", _CHECK, record=record)
    assert outcome.value.stdout.split() == ["7", "kept"]
    assert any("restored" in notice for notice in outcome.value.notices)


def test_a_thread_whose_claim_is_gone_resumes_on_a_new_claim(
    cluster: KubernetesEmulator, set_up: tuple[SandboxRuntime, SandboxRuntime, dict[str, Any]]
) -> None:
    first, second, record = set_up
    claim = record["session"]["sandbox_id"]
    cluster.delete_claim(claim)

    outcome = second.run_code("t", _CHECK, record=record)
    assert outcome.value.stdout.split() == ["7", "kept"]
    assert any("restored" in notice for notice in outcome.value.notices)
    new_claim = outcome.record["session"]["sandbox_id"]
    assert new_claim != claim
    assert list(cluster.claims()) == [new_claim]
    first.close()
    second.close()
    assert cluster.claims() == {}, "closing the runtimes deleted their claims"


def test_a_live_session_whose_pod_was_replaced_is_restored_not_run_on_an_empty_pod(
    cluster: KubernetesEmulator, runtimes: Callable[[], SandboxRuntime]
) -> None:
    """The session stays in this process's pool, but its pod was started again, empty: the worker
    it installed is gone, so the session is gone (as a devbox that expired under a live session
    is): the call says so, the thread comes back from its snapshot, and the next call sees it,
    instead of running silently on an empty pod."""
    runtime = runtimes()
    record = runtime.run_code("t", _SETUP).record
    runtime.flush()
    cluster.restart_pod(cluster.sandbox_of(record["session"]["sandbox_id"]))
    with pytest.raises(SandboxGoneError, match=r"was replaced.*Restored the workspace"):
        runtime.run_code("t", _CHECK, record=record)
    outcome = runtime.run_code("t", _CHECK)
    assert outcome.value.stdout.split() == ["7", "kept"]
