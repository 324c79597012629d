"""Runloop devboxes behind the provider contract, over ``runloop_api_client``'s async SDK.

A session is one devbox. Runloop offers shell commands, files, suspend/resume and disk snapshots,
but no kernel, so stateful Python runs in a small interpreter inside the devbox
(`langchain_sandbox.providers.guest.command_worker`), started in the background by the first
``run_code`` and reached by one short command per call. Every call is one ``execute_async``
request plus one ``wait_for_status`` long-poll while it runs (two HTTP requests for a warm call).

What this module guarantees:

* The SDK is imported only when a provider is built; without it, [`MissingDependencyError`][langchain_sandbox.MissingDependencyError]
  names the ``runloop`` extra.
* The API key comes from ``api_key=`` or the SDK's own ``RUNLOOP_API_KEY``; it is never stored in
  a record, a result, a log line or a repr.
* The SDK's hidden retries are off (``max_retries=0``): a 5xx on ``execute_async`` must not run
  user code twice. Operations safe to repeat (create, attach, reads, listing, uploads, snapshots,
  suspend, shutdown) are retried by `retry_async` instead, only
  for retryable errors and within a deadline.
* SDK errors become `langchain_sandbox.errors` in one place, `_translate`.

The session (the execution plumbing: one ``execute_async`` per call, the long-poll, live output,
telling a refusal from a gone devbox) is in ``session.py``; the worker's protocol is
`WorkerSession`'s and the SDK's errors are ``_sdk.py``'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import os
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.retries import DEFAULT_ATTEMPTS, retry_async
from langchain_sandbox.errors import (
    AuthenticationError,
    ProviderUnreachableError,
    SandboxError,
    SandboxGoneError,
)
from langchain_sandbox.providers.base import (
    Limits,
    SessionRecord,
    SessionSpec,
    install_spec_packages,
)
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import (
    SESSION_KEY,
    TAG_KEY,
    RemoteProvider,
    read_tags,
    tag_metadata,
)
from langchain_sandbox.providers.runloop._network import launch_network
from langchain_sandbox.providers.runloop._sdk import runloop_sdk, translate
from langchain_sandbox.providers.runloop.session import CAPABILITIES, RunloopSession
from langchain_sandbox.providers.worker_session import ShippedWorker

T = TypeVar("T")
_LISTED_STATUSES = (
    "queued",
    "provisioning",
    "initializing",
    "running",
    "suspending",
    "suspended",
    "resuming",
)

logger = logging.getLogger(__name__)


def _parse_template(template: str | None) -> dict[str, str]:
    """``snapshot:<id>``, ``blueprint_id:<id>``, ``blueprint:<name>`` or a bare blueprint name."""
    if not template:
        return {}
    kind, sep, value = template.partition(":")
    if sep and kind in ("snapshot", "snapshot_id"):
        return {"snapshot_id": value}
    if sep and kind == "blueprint_id":
        return {"blueprint_id": value}
    if sep and kind in ("blueprint", "blueprint_name"):
        return {"blueprint_name": value}
    return {"blueprint_name": template}


class RunloopProvider(RemoteProvider):
    """Sessions on Runloop devboxes.

    Args:
        api_key: Runloop API key; defaults to the SDK's ``RUNLOOP_API_KEY``.
        base_url: API URL; defaults to the SDK's ``RUNLOOP_BASE_URL``, then the public API.
        blueprint_id, blueprint_name, snapshot_id: Default image of new devboxes (a
            ``SessionSpec.template`` overrides them).
        launch_parameters: Runloop launch parameters (resource size, idle policy, keep-alive...).
        create_timeout: Seconds a devbox may take to reach ``running``.
        retry_attempts, retry_deadline: Bounds of the retries of safe operations.
    """

    name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        blueprint_id: str | None = None,
        blueprint_name: str | None = None,
        snapshot_id: str | None = None,
        launch_parameters: Mapping[str, Any] | None = None,
        create_timeout: float = 300.0,
        retry_attempts: int = DEFAULT_ATTEMPTS,
        retry_deadline: float = 60.0,
    ) -> None:
        super().__init__(retry_attempts=retry_attempts, retry_deadline=retry_deadline)
        runloop_sdk()
        if not (api_key or os.environ.get("RUNLOOP_API_KEY")):
            raise AuthenticationError(
                "No Runloop API key: pass api_key= to RunloopProvider or set RUNLOOP_API_KEY.",
                provider=PROVIDER_NAME,
            )
        self._api_key = api_key
        self._base_url = base_url
        self._image = {
            key: value
            for key, value in (
                ("blueprint_id", blueprint_id),
                ("blueprint_name", blueprint_name),
                ("snapshot_id", snapshot_id),
            )
            if value
        }
        self._launch_parameters = dict(launch_parameters or {})
        self.create_timeout = create_timeout
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self.shipped_worker = ShippedWorker()

    def __repr__(self) -> str:
        return f"RunloopProvider(base_url={self._base_url!r})"

    # ---- the SDK client -----------------------------------------------------------------------

    def sdk(self) -> Any:
        """The ``AsyncRunloopSDK`` of the running event loop (async clients are bound to one)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            sdk = runloop_sdk()
            try:
                client = sdk.AsyncRunloopSDK(
                    bearer_token=self._api_key, base_url=self._base_url, max_retries=0
                )
            except sdk.RunloopError as exc:
                raise AuthenticationError(
                    "No Runloop API key: pass api_key= or set RUNLOOP_API_KEY.",
                    provider=PROVIDER_NAME,
                ) from exc
            self._clients = {
                known: value for known, value in self._clients.items() if not known.is_closed()
            }
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        return translate(exc, what=what)

    # ---- the contract -------------------------------------------------------------------------

    async def create(self, spec: SessionSpec | None = None) -> RunloopSession:
        return await self._create(spec or SessionSpec(), {})

    async def create_from_snapshot(
        self, snapshot_id: str, spec: SessionSpec | None = None
    ) -> RunloopSession:
        """A new devbox whose disk (and saved Python variables) is a Runloop disk snapshot's."""
        return await self._create(spec or SessionSpec(), {"snapshot_id": snapshot_id})

    async def _create(self, spec: SessionSpec, image: dict[str, str]) -> RunloopSession:
        # A policy Runloop cannot enforce is refused here, before any request.
        async with self._errors("the network policy"):
            launch = {
                **self._launch_parameters,
                **await launch_network(self.sdk().api, spec.network),
            }
        session_id = uuid.uuid4().hex
        metadata = tag_metadata(spec.metadata, session_id)
        params: dict[str, Any] = {
            "name": f"langchain-sandbox-{session_id[:12]}",
            "metadata": metadata,
            **(image or _parse_template(spec.template) or self._image),
        }
        if spec.env:
            params["environment_variables"] = validate_env(spec.env)
        if launch:
            params["launch_parameters"] = launch
        from runloop_api_client.lib.polling import PollingConfig

        polling = PollingConfig(
            interval_seconds=1.0,
            max_attempts=max(1, math.ceil(self.create_timeout)),
            timeout_seconds=self.create_timeout,
        )

        async def attempt() -> Any:
            try:
                async with self._errors("devbox creation"):
                    return await self.sdk().api.devboxes.create_and_await_running(
                        **params, polling_config=polling
                    )
            except ProviderUnreachableError:
                raise  # the request never left: no devbox was made
            except SandboxError:
                # The request may have reached Runloop: a devbox half made must not leak.
                await self._shutdown_tagged(session_id)
                raise

        view = await retry_async(attempt, deadline=self.create_timeout)
        session = RunloopSession(
            self,
            devbox_id=view.id,
            session_id=session_id,
            spec=spec,
            created_at=view.create_time_ms / 1000,
            state={"limits": dataclasses.asdict(spec.limits)},
        )
        try:
            await session.install_worker()
        except BaseException:
            await session.close()
            raise
        await install_spec_packages(session)
        return session

    async def _shutdown_tagged(self, session_id: str) -> None:
        try:
            # A devbox this create made is among the newest: the first page is enough.
            first_page = await self.sdk().api.devboxes.list(limit=100)
            for view in first_page.devboxes:
                if view.metadata.get(SESSION_KEY) == session_id and view.status != "shutdown":
                    await self.sdk().api.devboxes.shutdown(view.id)
        except Exception as exc:
            # One line: the creation's own error is what the caller gets; the traceback of a
            # cleanup that could not reach Runloop either is for debugging only.
            logger.warning("could not clean up after a failed Runloop devbox creation: %r", exc)
            logger.debug("cleanup failure", exc_info=True)

    async def _live_views(self) -> list[Any]:
        """Devboxes not shut down, one status at a time: an account's history of shut-down
        devboxes can be long, and only live ones can be attached or cost anything."""

        async def listing(status: str) -> list[Any]:
            devboxes = self.sdk().api.devboxes
            return [view async for view in devboxes.list(limit=100, status=status)]

        views: list[Any] = []
        for status in _LISTED_STATUSES:
            views += await self._retry("listing devboxes", functools.partial(listing, status))
        return views

    async def _attach(self, record: SessionRecord) -> RunloopSession | None:
        devbox_id = record["sandbox_id"]
        try:
            view = await self._retry(
                "devbox lookup", lambda: self.sdk().api.devboxes.retrieve(devbox_id)
            )
        except SandboxGoneError:
            return None
        if view.status in ("shutdown", "failure"):
            return None
        state = dict(record.get("state") or {})
        limits = Limits(**state["limits"]) if isinstance(state.get("limits"), dict) else Limits()
        session = RunloopSession(
            self,
            devbox_id=devbox_id,
            session_id=record.get("session_id") or view.metadata.get(SESSION_KEY, devbox_id),
            spec=SessionSpec(limits=limits, metadata=dict(record.get("metadata") or {})),
            created_at=record.get("created_at", view.create_time_ms / 1000),
            state=state,
        )
        try:
            await session.wake(view.status)
        except SandboxGoneError:
            return None
        return session

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        wanted = dict(metadata or {})
        records: list[SessionRecord] = []
        for view in await self._live_views():
            tags = dict(view.metadata or {})
            if tags.get(TAG_KEY) != "1":
                continue
            if any(tags.get(key) != value for key, value in wanted.items()):
                continue
            session_id, metadata = read_tags(tags, view.id)
            records.append(
                SessionRecord(
                    provider=PROVIDER_NAME,
                    session_id=session_id,
                    sandbox_id=view.id,
                    created_at=view.create_time_ms / 1000,
                    metadata=metadata,
                    state={"status": view.status},
                )
            )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        devbox_id = record["sandbox_id"]
        try:
            view = await self._retry(
                "devbox lookup", lambda: self.sdk().api.devboxes.retrieve(devbox_id)
            )
            if view.status == "shutdown":
                return False
            await self._retry("shutdown", lambda: self.sdk().api.devboxes.shutdown(devbox_id))
        except SandboxGoneError:
            return False
        return True


__all__ = ["CAPABILITIES", "PROVIDER_NAME", "RunloopProvider", "RunloopSession"]
