"""Sessions on a Kubernetes cluster running kubernetes-sigs/agent-sandbox, over ``k8s-agent-sandbox``.

A session is one ``SandboxClaim`` from a ``SandboxWarmPool``, bound by the controller to a
``Sandbox`` whose pod runs the shipped worker (see ``session.py``). Every request to the cluster
is one the SDK's ``AsyncSandboxClient`` makes; this module hand-rolls none.

What this module guarantees:

* The SDK is imported only when a provider is built; without it, `MissingDependencyError` names
  the ``kubernetes`` extra.
* Credentials are the standard ones: the in-cluster service account, else the kubeconfig
  (``kubeconfig=``/``context=``, else ``KUBECONFIG``/``~/.kube/config``). They stay inside the
  SDK's ``ApiClient``: never in a record, a result, a log line or a repr.
* One claim per session, named from the thread (``thread_id`` in the spec's metadata) plus the
  session, so ``kubectl get sandboxclaims`` shows whose it is. The name is the caller's
  (``claim_name=``, not deleted by the SDK's cleanup), created with ``adopt_existing=True`` so a
  create retried after a lost answer adopts the claim it made instead of leaking a second one.
* Claims carry `MANAGED_LABEL` and `SESSION_LABEL` (``gc`` lists by the first) and the spec's
  metadata as the pod annotation `METADATA_ANNOTATION`; ``shutdown_after`` becomes the claim's
  ``lifecycle.shutdownTime`` (policy ``Delete``), so a claim whose worker process died is
  deleted by the controller even if ``gc`` never runs.
* SDK errors become `langchain_sandbox.errors` in one place, `_translate`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.retries import DEFAULT_ATTEMPTS, retry_async
from langchain_sandbox.errors import (
    ConfigurationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
)
from langchain_sandbox.network import refuse_policy
from langchain_sandbox.providers.base import (
    Limits,
    SessionRecord,
    SessionSpec,
    install_spec_packages,
)
from langchain_sandbox.providers.kubernetes.session import CAPABILITIES, KubernetesSession
from langchain_sandbox.providers.names import KUBERNETES as PROVIDER_NAME
from langchain_sandbox.providers.remote import RemoteProvider, load_sdk
from langchain_sandbox.providers.remote_errors import status_error
from langchain_sandbox.providers.worker_session import ShippedWorker

MANAGED_LABEL = "app.kubernetes.io/managed-by"
"""Label set to ``langchain-sandbox`` on every claim this package creates (``gc`` selects on it)."""
MANAGED_VALUE = "langchain-sandbox"
SESSION_LABEL = "langchain-sandbox.dev/session"
"""Label holding the session id, so a listed claim maps back to its session."""
METADATA_ANNOTATION = "langchain-sandbox.dev/metadata"
"""Pod annotation (``spec.additionalPodMetadata``) holding the spec's metadata as JSON."""
RUNTIME_URL_ENV = "LANGCHAIN_SANDBOX_K8S_RUNTIME_URL"
"""Where the sandbox router is, when ``runtime_url=`` is not given (a direct connection)."""
DEFAULT_WARM_POOL = "python-sandbox-warmpool"

_NAME_PART = re.compile(r"[^a-z0-9-]+")


def _sdk() -> Any:
    return load_sdk(
        "k8s_agent_sandbox.async_sandbox_client",
        package="k8s-agent-sandbox[async]",
        extra="kubernetes",
        purpose="The Kubernetes provider",
    )


def claim_name(thread_id: str | None, session_id: str) -> str:
    """A DNS-1123 claim name: a readable piece of the thread, a hash of all of it, the session."""
    if not thread_id:
        return f"lcs-{session_id[:16]}"
    readable = _NAME_PART.sub("-", thread_id.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(thread_id.encode()).hexdigest()[:8]
    return "-".join(part for part in ("lcs", readable, digest, session_id[:8]) if part)


def _translate(exc: BaseException, *, what: str) -> SandboxError:
    """Map an SDK, Kubernetes API or transport error to the package's taxonomy."""
    if isinstance(exc, SandboxError):
        return exc
    from k8s_agent_sandbox import exceptions as sdk_errors
    from kubernetes_asyncio.client import ApiException

    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    details: dict[str, Any] = {"status": status} if isinstance(status, int) else {}
    text = f"Kubernetes {what} failed: {str(exc)[:300] or type(exc).__name__}"
    if isinstance(
        exc, (sdk_errors.SandboxWarmPoolNotFoundError, sdk_errors.SandboxTemplateNotFoundError)
    ):
        return ConfigurationError(text, provider=PROVIDER_NAME, details=details)
    if isinstance(exc, (sdk_errors.SandboxNotFoundError, sdk_errors.SandboxMetadataError)):
        return SandboxGoneError(text, provider=PROVIDER_NAME, details=details)
    if isinstance(exc, TimeoutError):
        return SandboxTimeoutError(f"Kubernetes {what} timed out", provider=PROVIDER_NAME)
    if isinstance(exc, (ApiException, sdk_errors.SandboxRequestError)):
        if status is None:
            return ProviderUnreachableError(
                f"The sandbox runtime could not be reached ({what})", provider=PROVIDER_NAME
            )
        if status == 404 and isinstance(exc, sdk_errors.SandboxRequestError) and what == "download":
            return InvalidPathError(text, provider=PROVIDER_NAME, details=details)
        return status_error(
            status,
            provider=PROVIDER_NAME,
            label="Kubernetes",
            what=what,
            message=str(exc)[:300] or type(exc).__name__,
        )
    import aiohttp

    if isinstance(exc, (aiohttp.ClientConnectorError, ConnectionError)):
        return ProviderUnreachableError(
            f"The Kubernetes API could not be reached ({what})", provider=PROVIDER_NAME
        )
    if isinstance(exc, aiohttp.ClientError):
        return ProviderUnavailableError(text, provider=PROVIDER_NAME)
    if isinstance(exc, ValueError):
        return InvalidInputError(text, provider=PROVIDER_NAME)
    return SandboxError(text, provider=PROVIDER_NAME, details=details)


class KubernetesProvider(RemoteProvider):
    """Sessions as agent-sandbox SandboxClaims on a Kubernetes cluster.

    Args:
        warm_pool: The ``SandboxWarmPool`` claims are made from (a ``SessionSpec.template``
            names another).
        namespace: Where the claims live.
        runtime_url: The sandbox router's URL (a direct connection; default: the
            ``LANGCHAIN_SANDBOX_K8S_RUNTIME_URL`` variable). Give ``connection=`` instead for the
            SDK's other ways in (in-cluster, Gateway).
        connection: An SDK connection config (``SandboxInClusterConnectionConfig()``, a
            ``SandboxGatewayConnectionConfig``...); inside a cluster with neither this nor
            ``runtime_url``, pods are reached in-cluster.
        kubeconfig, context: The kubeconfig file and context (default: in-cluster credentials,
            else ``KUBECONFIG`` or ``~/.kube/config``).
        shutdown_after: Seconds after which the controller deletes a claim whatever happens
            (``None``: never); set it above the longest a thread's session may live.
        ready_timeout: Seconds a claim may take to be bound and ready.
        retry_attempts, retry_deadline: Bounds of the retries of safe operations.
    """

    name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        *,
        warm_pool: str = DEFAULT_WARM_POOL,
        namespace: str = "default",
        runtime_url: str | None = None,
        connection: Any | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        shutdown_after: int | None = 24 * 3600,
        ready_timeout: int = 180,
        retry_attempts: int = DEFAULT_ATTEMPTS,
        retry_deadline: float = 60.0,
    ) -> None:
        super().__init__(retry_attempts=retry_attempts, retry_deadline=retry_deadline)
        _sdk()
        self.warm_pool = warm_pool
        self.namespace = namespace
        self._runtime_url = runtime_url or os.environ.get(RUNTIME_URL_ENV)
        self._connection = connection
        self._kubeconfig = kubeconfig
        self._context = context
        if shutdown_after is not None and shutdown_after <= 0:
            raise InvalidInputError("shutdown_after must be a positive number of seconds.")
        self.shutdown_after = shutdown_after
        self.ready_timeout = ready_timeout
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self._handles: dict[tuple[asyncio.AbstractEventLoop, str], Any] = {}
        self.shipped_worker = ShippedWorker()

    def __repr__(self) -> str:
        return f"KubernetesProvider(namespace={self.namespace!r}, warm_pool={self.warm_pool!r})"

    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        return _translate(exc, what=what)

    # ---- the SDK client -----------------------------------------------------------------------

    def _connection_config(self) -> Any:
        from k8s_agent_sandbox import models

        if self._connection is not None:
            return self._connection
        if self._runtime_url:
            return models.SandboxDirectConnectionConfig(api_url=self._runtime_url)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return models.SandboxInClusterConnectionConfig()
        raise ConfigurationError(
            "The Kubernetes provider needs the sandbox router: pass runtime_url= (or set "
            f"{RUNTIME_URL_ENV}), or connection= with an SDK connection config.",
            provider=PROVIDER_NAME,
        )

    async def _api_client(self) -> Any:
        """A ``kubernetes_asyncio`` client of its own (the SDK's default loads into a global).
        Its configuration is loaded in a worker thread: the loaders read the kubeconfig, or a
        service account's token and CA, with blocking file calls."""
        from kubernetes_asyncio import client

        return client.ApiClient(await asyncio.to_thread(self._configuration))

    def _configuration(self) -> Any:
        from kubernetes_asyncio import client, config

        if self._kubeconfig is None and self._context is None:
            with contextlib.suppress(config.ConfigException):
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                return configuration
        # A fresh Configuration, not a copy of the module's default (as new_client_from_config).
        configuration = type.__call__(client.Configuration)
        try:
            # KUBECONFIG read now, not when kubernetes_asyncio was first imported; this thread
            # has no loop of its own, so the loader's coroutine runs on a private one.
            asyncio.run(
                config.load_kube_config(
                    config_file=self._kubeconfig or os.environ.get("KUBECONFIG"),
                    context=self._context,
                    client_configuration=configuration,
                )
            )
        except (config.ConfigException, OSError) as exc:
            raise ConfigurationError(
                f"No Kubernetes credentials: not in a cluster, and the kubeconfig could not be "
                f"loaded ({type(exc).__name__}).",
                provider=PROVIDER_NAME,
            ) from exc
        return configuration

    async def client(self) -> Any:
        """The ``AsyncSandboxClient`` of the running event loop (its HTTP sessions are bound
        to one loop)."""
        loop = asyncio.get_running_loop()
        made = self._clients.get(loop)
        if made is None:
            sdk = _sdk()
            made = sdk.AsyncSandboxClient(
                connection_config=self._connection_config(),
                cleanup=False,
                api_client=await self._api_client(),
            )
            self._clients = {
                known: value for known, value in self._clients.items() if not known.is_closed()
            }
            self._clients[loop] = made
        return made

    async def handle(self, claim: str, warm_pool: str | None = None) -> Any:
        """The SDK's ``AsyncSandbox`` for ``claim`` on this loop (looked up once per loop).

        The claim is read first (checking it is from ``warm_pool``): a claim that is gone is
        told at once, not after the SDK's wait for its sandbox name.
        """
        key = (asyncio.get_running_loop(), claim)
        handle = self._handles.get(key)
        if handle is None or not handle.is_active:
            client = await self.client()
            async with self._errors("sandbox lookup"):
                handle = await client.get_sandbox(
                    claim, namespace=self.namespace, warmpool_name=warm_pool or self.warm_pool
                )
            self._handles[key] = handle
        return handle

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        for key in [key for key in self._handles if key[0] is loop]:
            del self._handles[key]
        if client is not None:
            await client.close()
            with contextlib.suppress(Exception):
                await client.k8s_helper._api_client.close()

    # ---- the contract -------------------------------------------------------------------------

    async def create(self, spec: SessionSpec | None = None) -> KubernetesSession:
        spec = spec or SessionSpec()
        refuse_policy(
            spec.network,
            "Kubernetes",
            offers="egress is the cluster's NetworkPolicy on the template's pods",
        )
        session_id = uuid.uuid4().hex
        name = claim_name(spec.metadata.get("thread_id"), session_id)
        pool = spec.template or self.warm_pool
        client = await self.client()
        options: dict[str, Any] = {
            "namespace": self.namespace,
            "sandbox_ready_timeout": self.ready_timeout,
            "labels": {MANAGED_LABEL: MANAGED_VALUE, SESSION_LABEL: session_id},
            "claim_name": name,
            "adopt_existing": True,
            "shutdown_after_seconds": self.shutdown_after,
            "pod_annotations": {METADATA_ANNOTATION: json.dumps(dict(spec.metadata))},
        }
        if spec.env:
            options["env"] = validate_env(spec.env)

        async def attempt() -> Any:
            # A retry after a lost answer adopts the claim the first attempt made.
            async with self._errors("claim creation"):
                return await client.create_sandbox(pool, **options)

        try:
            handle = await retry_async(attempt, deadline=self.ready_timeout)
        except SandboxError:
            # The claim may exist without a ready pod; it is the caller's, so it goes here.
            with contextlib.suppress(SandboxError):
                await self.delete_claim(name)
            raise
        self._handles[(asyncio.get_running_loop(), name)] = handle
        session = KubernetesSession(
            self,
            claim=name,
            sandbox_name=handle.sandbox_id,
            session_id=session_id,
            spec=spec,
            created_at=time.time(),
            state={
                "limits": _limits_state(spec.limits),
                "namespace": self.namespace,
                "warm_pool": pool,
            },
        )
        try:
            await session.install_worker()
        except BaseException:
            await session.close()
            raise
        await install_spec_packages(session)
        return session

    async def _attach(self, record: SessionRecord) -> KubernetesSession | None:
        claim = record["sandbox_id"]
        state = dict(record.get("state") or {})
        try:
            handle = await self._retry(
                "sandbox lookup", lambda: self.handle(claim, state.get("warm_pool"))
            )
            status, _ = await self._retry("sandbox status", handle.status)
        except SandboxGoneError:
            return None
        if status != "SandboxReady":
            return None
        limits = Limits(**state["limits"]) if isinstance(state.get("limits"), dict) else Limits()
        return KubernetesSession(
            self,
            claim=claim,
            sandbox_name=handle.sandbox_id,
            session_id=record.get("session_id") or claim,
            spec=SessionSpec(limits=limits, metadata=dict(record.get("metadata") or {})),
            created_at=record.get("created_at", time.time()),
            state=state,
        )

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        client = await self.client()
        wanted = dict(metadata or {})
        names = await self._retry(
            "listing claims",
            lambda: client.list_all_sandboxes(
                self.namespace, label_selector=f"{MANAGED_LABEL}={MANAGED_VALUE}"
            ),
        )
        records: list[SessionRecord] = []
        for name in names:
            claim = await self._retry(
                "claim lookup",
                functools.partial(client.k8s_helper.get_sandbox_claim, name, self.namespace),
            )
            if claim is None:
                continue
            tags = _claim_metadata(claim)
            if any(tags.get(key) != value for key, value in wanted.items()):
                continue
            labels = claim["metadata"].get("labels") or {}
            records.append(
                SessionRecord(
                    provider=PROVIDER_NAME,
                    session_id=labels.get(SESSION_LABEL, name),
                    sandbox_id=name,
                    created_at=_created_at(claim),
                    metadata=tags,
                    state={"namespace": self.namespace},
                )
            )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        client = await self.client()
        claim = record["sandbox_id"]
        existing = await self._retry(
            "claim lookup", lambda: client.k8s_helper.get_sandbox_claim(claim, self.namespace)
        )
        if existing is None:
            return False
        await self.delete_claim(claim)
        return True

    async def delete_claim(self, claim: str) -> None:
        """Delete ``claim`` through the SDK (a claim already gone is not an error)."""
        client = await self.client()
        self._handles.pop((asyncio.get_running_loop(), claim), None)
        await self._retry(
            "claim deletion",
            lambda: client.k8s_helper.delete_sandbox_claim(claim, self.namespace),
        )


def _limits_state(limits: Limits) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(limits)


def _claim_metadata(claim: Mapping[str, Any]) -> dict[str, str]:
    pod = (claim.get("spec") or {}).get("additionalPodMetadata") or {}
    raw = (pod.get("annotations") or {}).get(METADATA_ANNOTATION, "{}")
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}


def _created_at(claim: Mapping[str, Any]) -> float:
    import datetime as dt

    stamp = (claim.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return time.time()
    return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


__all__ = [
    "MANAGED_LABEL",
    "METADATA_ANNOTATION",
    "SESSION_LABEL",
    "KubernetesProvider",
    "claim_name",
]
