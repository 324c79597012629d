"""The Kubernetes provider through the real ``k8s-agent-sandbox`` SDK against the emulated cluster:
the exact requests it makes, the claim's name and labels, adoption after a lost answer, attach
from another provider (as another process would), and the lifecycle the controller enforces."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import AsyncIterator

import pytest
from emulated_providers import provider_on

from langchain_sandbox.errors import ConfigurationError, SandboxGoneError
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.kubernetes import (
    MANAGED_LABEL,
    METADATA_ANNOTATION,
    SESSION_LABEL,
    KubernetesProvider,
)
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator, RecordedRequest

_CLAIMS = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims"
_SANDBOXES = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes"
# Every request AsyncK8sHelper (the SDK's Kubernetes client) can send for what the provider
# does, and every runtime request its connector can send: nothing else may reach the cluster.
_SDK_API_REQUESTS = [
    ("POST", re.compile(re.escape(_CLAIMS))),
    ("GET", re.compile(re.escape(_CLAIMS))),  # list, and the watch (watch=True)
    ("GET", re.compile(re.escape(_CLAIMS) + r"/[a-z0-9.-]+")),
    ("DELETE", re.compile(re.escape(_CLAIMS) + r"/[a-z0-9.-]+")),
    ("GET", re.compile(re.escape(_SANDBOXES) + r"/[a-z0-9.-]+")),
]
_SDK_RUNTIME_REQUESTS = [
    ("POST", re.compile(r"/execute")),
    ("POST", re.compile(r"/upload")),
    ("GET", re.compile(r"/download/[^/]+")),
]


@pytest.fixture
async def cluster() -> AsyncIterator[KubernetesEmulator]:
    async with KubernetesEmulator() as running:
        yield running


@pytest.fixture
async def provider(cluster: KubernetesEmulator) -> AsyncIterator[KubernetesProvider]:
    async with provider_on(cluster, retry_deadline=20.0) as made:
        yield made


def _posted_claims(cluster: KubernetesEmulator) -> list[RecordedRequest]:
    return [r for r in cluster.requests if r.method == "POST" and r.path == _CLAIMS]


async def test_a_session_is_one_claim_named_from_its_thread_labelled_and_deleted_on_close(
    cluster: KubernetesEmulator, provider: KubernetesProvider
) -> None:
    session = await provider.create(
        SessionSpec(metadata={"thread_id": "Support/Ticket 42", "team": "ops"})
    )
    claim = session.record["sandbox_id"]
    assert re.fullmatch(r"lcs-support-ticket-42-[0-9a-f]{8}-" + session.session_id[:8], claim)

    (posted,) = _posted_claims(cluster)
    body = posted.json()
    assert body["metadata"]["name"] == claim
    assert body["metadata"]["labels"][MANAGED_LABEL] == "langchain-sandbox"
    assert body["metadata"]["labels"][SESSION_LABEL] == session.session_id
    assert body["spec"]["warmPoolRef"] == {"name": "python-sandbox-warmpool"}
    assert body["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
    annotations = body["spec"]["additionalPodMetadata"]["annotations"]
    assert json.loads(annotations[METADATA_ANNOTATION]) == {
        "thread_id": "Support/Ticket 42",
        "team": "ops",
    }
    # The wait for readiness is a watch from the create answer's resourceVersion.
    watch = next(r for r in cluster.requests if r.query.get("watch"))
    assert watch.query["fieldSelector"] == [f"metadata.name={claim}"]
    assert watch.query["resourceVersion"] == [posted_version(cluster, claim)]

    listed = await provider.list_sessions({"team": "ops"})
    assert [(r["sandbox_id"], r["session_id"]) for r in listed] == [(claim, session.session_id)]
    assert listed[0]["metadata"] == {"thread_id": "Support/Ticket 42", "team": "ops"}
    assert await provider.list_sessions({"team": "other"}) == []

    await session.close()
    deletes = [r for r in cluster.requests if r.method == "DELETE"]
    assert [r.path for r in deletes] == [f"{_CLAIMS}/{claim}"]
    assert cluster.claims() == {}
    assert await provider.list_sessions() == []


def posted_version(cluster: KubernetesEmulator, claim: str) -> str:
    """The resourceVersion the create answer carried (the claim's first)."""
    history = cluster.cluster.history
    return next(
        str(version)
        for version, plural, kind, obj in history
        if plural == "sandboxclaims" and kind == "ADDED" and obj["metadata"]["name"] == claim
    )


async def test_every_request_is_one_the_sdk_makes(
    cluster: KubernetesEmulator, provider: KubernetesProvider
) -> None:
    session = await provider.create(SessionSpec(metadata={"thread_id": "t"}))
    await session.run_code("x = 1", timeout=30)
    await session.write_files({"a.txt": b"a"})
    assert await session.read_files(["a.txt"]) == {"a.txt": b"a"}
    await provider.list_sessions()
    second = cluster.provider()
    try:
        attached = await second.attach(session.record)
        assert attached is not None
        assert (await attached.run_code("x + 1", timeout=30)).value == "2"
    finally:
        await second.aclose()
    await session.close()

    seen = cluster.requests
    assert seen
    for request in seen:
        if request.path.startswith("/apis/"):
            allowed = _SDK_API_REQUESTS
            # kubernetes_asyncio's generated client, as the SDK builds it.
            assert request.headers["user-agent"].startswith("OpenAPI-Generator/")
        else:
            allowed = _SDK_RUNTIME_REQUESTS
            # The SDK's connector routes every runtime request by these headers.
            assert request.headers["x-sandbox-id"] == session.sandbox_name
            assert request.headers["x-sandbox-namespace"] == "default"
        assert any(
            method == request.method and pattern.fullmatch(request.path)
            for method, pattern in allowed
        ), f"{request.method} {request.path} is not a request the SDK makes"


async def test_a_create_whose_answer_was_lost_adopts_its_own_claim(
    cluster: KubernetesEmulator, provider: KubernetesProvider
) -> None:
    cluster.inject(re.escape(_CLAIMS) + "$", method="POST", drop=True)
    session = await provider.create(SessionSpec(metadata={"thread_id": "lost"}))

    posted = _posted_claims(cluster)
    assert [r.status for r in posted] == [0, 409], "the retry met the claim the first one made"
    assert posted[0].json()["metadata"]["name"] == posted[1].json()["metadata"]["name"]
    claim = session.record["sandbox_id"]
    gets = [r for r in cluster.requests if r.method == "GET" and r.path == f"{_CLAIMS}/{claim}"]
    assert gets, "adoption reads the existing claim"
    assert list(cluster.claims()) == [claim], "one claim, not two"
    assert (await session.run_code("6 * 7", timeout=30)).value == "42"
    await session.close()


async def test_another_provider_attaches_to_the_live_pod(
    cluster: KubernetesEmulator, provider: KubernetesProvider
) -> None:
    session = await provider.create(SessionSpec(metadata={"thread_id": "t"}))
    await session.run_code("kept = [1, 2]", timeout=30)
    cluster.clear_requests()
    other = cluster.provider()
    try:
        attached = await other.attach(session.record)
        assert attached is not None
        assert attached.record["sandbox_id"] == session.record["sandbox_id"]
        assert (await attached.run_code("kept + [3]", timeout=30)).value == "[1, 2, 3]"
        # Attaching reads; it never creates.
        assert not [r for r in cluster.requests if r.method == "POST" and r.path == _CLAIMS]
    finally:
        await other.aclose()
    await session.close()


async def test_attach_to_a_deleted_claim_finds_nothing(
    cluster: KubernetesEmulator, provider: KubernetesProvider
) -> None:
    session = await provider.create(SessionSpec())
    cluster.delete_claim(session.record["sandbox_id"])
    other = cluster.provider()
    try:
        assert await other.attach(session.record) is None
        assert await other.destroy(session.record) is False
    finally:
        await other.aclose()
    with pytest.raises(SandboxGoneError):
        await session.run_code("1", timeout=30)


async def test_the_controller_deletes_a_claim_past_its_shutdown_time(
    cluster: KubernetesEmulator,
) -> None:
    provider = cluster.provider(shutdown_after=600)
    try:
        session = await provider.create(SessionSpec())
        claim = session.record["sandbox_id"]
        (posted,) = _posted_claims(cluster)
        created = dt.datetime.fromisoformat(
            posted.json()["metadata"]["annotations"]["agents.x-k8s.io/client-first-requested-at"]
        )
        shutdown = dt.datetime.fromisoformat(
            posted.json()["spec"]["lifecycle"]["shutdownTime"].replace("Z", "+00:00")
        )
        assert 599 <= (shutdown - created).total_seconds() <= 601
        cluster.advance_clock(300)
        assert not cluster.cluster.wait_for(lambda: claim not in cluster.claims(), timeout=1)
        cluster.advance_clock(301)
        assert cluster.cluster.wait_for(lambda: claim not in cluster.claims(), timeout=30)
        assert await provider.attach(session.record) is None
    finally:
        await provider.aclose()


async def test_a_missing_warm_pool_is_a_configuration_error_and_leaves_no_claim(
    cluster: KubernetesEmulator,
) -> None:
    provider = cluster.provider(warm_pool="no-such-pool")
    try:
        with pytest.raises(ConfigurationError, match="WarmPool"):
            await provider.create(SessionSpec())
    finally:
        await provider.aclose()
    assert cluster.claims() == {}


async def test_the_provider_needs_the_router_and_keeps_credentials_out_of_sight(
    cluster: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGCHAIN_SANDBOX_K8S_RUNTIME_URL", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    bare = KubernetesProvider(kubeconfig=str(cluster.kubeconfig))
    with pytest.raises(ConfigurationError, match="runtime_url"):
        await bare.create(SessionSpec())
    provider = cluster.provider()
    try:
        session = await provider.create(SessionSpec())
        token = cluster._token
        assert token not in repr(provider)
        assert token not in json.dumps(session.record)
        assert all(token not in json.dumps(r.headers) for r in cluster.requests)
        await session.close()
    finally:
        await provider.aclose()
