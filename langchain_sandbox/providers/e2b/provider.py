"""The E2B provider: sessions on E2B cloud sandboxes through ``e2b-code-interpreter``.

* Python runs in the sandbox's Jupyter kernel (``AsyncSandbox.run_code``): variables persist, the
  last expression's value comes back, matplotlib figures come back as PNG artifacts.
* Commands run through envd (``sandbox.commands``); a non-zero exit is a result.
* Files move through envd's file API (``sandbox.files``), always inside ``/home/user``.
* The sandbox's lease (E2B's sandbox timeout) is tracked locally and extended only when it is about
  to run out, so a warm ``run_code`` costs exactly one HTTP request.
* ``pause()`` keeps the sandbox, memory included; [`E2BProvider.attach`][langchain_sandbox.E2BProvider.attach] resumes it, from any
  process. ``close()`` kills it. Sandboxes carry metadata tags so ``gc`` can find orphans.

Retries: the SDK's own control-plane retries are switched off (``retries=0``) so that one policy,
`retry_async`, decides, bounded by a deadline; it retries only
operations that are safe to repeat. Running code or a command is never retried: the SDK sends
``/execute`` and ``process.Process/Start`` once (its only transport retry is for connections that
could not be established, before anything was sent).

The SDK is an optional extra (``pip install 'langchain-sandbox[e2b]'``), imported when a provider
is built. Credentials come from ``api_key=`` or the SDK's ``E2B_API_KEY``; they are never part of a
record, a result, a log line or a repr.

The session is in ``session.py``; its kernel calls in ``_kernel.py``, its files in ``_files.py``,
the SDK's errors and results in ``_wire.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.retries import DEFAULT_ATTEMPTS, DEFAULT_DEADLINE
from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    SandboxError,
    SandboxGoneError,
)
from langchain_sandbox.providers.base import (
    Limits,
    Session,
    SessionRecord,
    SessionSpec,
    install_spec_packages,
)
from langchain_sandbox.providers.e2b._kernel import shipped_kernel_state
from langchain_sandbox.providers.e2b._network import create_network, recorded_network
from langchain_sandbox.providers.e2b._wire import load_e2b_sdk, translate
from langchain_sandbox.providers.e2b.session import CAPABILITIES, E2BSession
from langchain_sandbox.providers.names import E2B as PROVIDER_NAME
from langchain_sandbox.providers.remote import (
    SESSION_KEY,
    TAG_KEY,
    RemoteProvider,
    read_tags,
    tag_metadata,
)

logger = logging.getLogger(__name__)


class E2BProvider(RemoteProvider):
    """Sessions on E2B sandboxes.

    Args:
        api_key: E2B API key; defaults to the SDK's ``E2B_API_KEY``. Never stored in records.
        template: Sandbox template; defaults to the code-interpreter template.
        domain: E2B domain (self-hosted deployments); defaults to the SDK's ``E2B_DOMAIN``.
        api_url, sandbox_url: Explicit endpoints (the emulator, a proxy); default to the SDK's
            ``E2B_API_URL`` / ``E2B_SANDBOX_URL``, else the E2B cloud.
        lease_seconds: Sandbox timeout set on create, resume and each extension. An idle sandbox
            stops costing money at most this long after its last use.
        lease_refresh_below: Extend the lease only when less than this many seconds are left
            (beyond what the next call needs).
        on_timeout: What E2B does when the lease runs out: ``"kill"``, or ``"pause"`` (the
            sandbox and its memory are kept, and `attach` resumes it).
        request_timeout: Per-request timeout of control-plane and file calls, seconds.
        retry_attempts, retry_deadline: Bounds of the retries of safe operations.
    """

    name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str | None = None,
        domain: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        lease_seconds: int = 300,
        lease_refresh_below: float = 60.0,
        on_timeout: Literal["kill", "pause"] = "kill",
        request_timeout: float = 30.0,
        retry_attempts: int = DEFAULT_ATTEMPTS,
        retry_deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        if lease_seconds <= 0 or lease_refresh_below < 0:
            raise InvalidInputError("lease_seconds must be positive and lease_refresh_below >= 0.")
        sdk = load_e2b_sdk()
        if not (api_key or os.environ.get("E2B_API_KEY")):
            raise AuthenticationError(
                "No E2B API key: pass api_key= to E2BProvider or set E2B_API_KEY.",
                provider=PROVIDER_NAME,
            )
        self._api_key = api_key
        self.template = template
        self.lease_seconds = int(lease_seconds)
        self.lease_refresh_below = float(lease_refresh_below)
        self.on_timeout = on_timeout
        self._api_url = api_url
        super().__init__(retry_attempts=retry_attempts, retry_deadline=retry_deadline)
        params: dict[str, Any] = {
            "api_key": api_key,
            "domain": domain,
            "api_url": api_url,
            "sandbox_url": sandbox_url,
            "request_timeout": request_timeout,
            "retries": 0,
        }
        self._sandbox_cls = sdk.E2B(
            **{k: v for k, v in params.items() if v is not None}
        ).AsyncSandbox

    def __repr__(self) -> str:
        return f"E2BProvider(template={self.template!r}, api_url={self._api_url!r})"

    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        return translate(exc, what, secret=self._api_key, path=path)

    async def create(self, spec: SessionSpec | None = None) -> Session:
        spec = spec or SessionSpec()
        network = create_network(spec.network)
        session_id = uuid.uuid4().hex
        metadata = tag_metadata(spec.metadata, session_id)
        env = validate_env(spec.env)
        # Retries of a create reuse one idempotency key, so E2B never makes a second sandbox.
        idempotency_key = str(uuid.uuid4())
        await asyncio.to_thread(shipped_kernel_state)
        sandbox = await self._retry(
            "create a sandbox",
            lambda: self._sandbox_cls.create(
                template=spec.template or self.template,
                timeout=self.lease_seconds,
                metadata=metadata,
                envs=env,
                **network,
                lifecycle={"on_timeout": self.on_timeout},
                idempotency_key=idempotency_key,
            ),
        )
        logger.debug("E2B: created sandbox %s for session %s", sandbox.sandbox_id, session_id)
        session = E2BSession(self, sandbox, spec, session_id=session_id, created_at=time.time())
        await install_spec_packages(session)
        return session

    async def _attach(self, record: SessionRecord) -> Session | None:
        sandbox_id = record["sandbox_id"]
        await asyncio.to_thread(shipped_kernel_state)
        try:
            sandbox = await self._retry(
                "connect to the sandbox",
                lambda: self._sandbox_cls.connect(sandbox_id, timeout=self.lease_seconds),
            )
        except SandboxGoneError:
            return None
        state = record.get("state") or {}
        limits = Limits(**{**(state.get("limits") or {})})
        spec = SessionSpec(
            template=state.get("template"),
            limits=limits,
            network=recorded_network(state),
            metadata=dict(record.get("metadata") or {}),
        )
        return E2BSession(
            self,
            sandbox,
            spec,
            session_id=record.get("session_id") or uuid.uuid4().hex,
            created_at=float(record.get("created_at") or time.time()),
        )

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        from e2b import SandboxQuery

        query = SandboxQuery(metadata={**dict(metadata or {}), TAG_KEY: "1"})
        paginator = self._sandbox_cls.list(query=query)
        records: list[SessionRecord] = []
        while paginator.has_next:
            for info in await self._retry("list sandboxes", paginator.next_items):
                session_id, tags = read_tags(info.metadata, info.sandbox_id)
                state = str(getattr(info.state, "value", info.state))
                records.append(
                    SessionRecord(
                        provider=PROVIDER_NAME,
                        session_id=session_id,
                        sandbox_id=info.sandbox_id,
                        created_at=info.started_at.timestamp(),
                        metadata=tags,
                        state={"template": info.template_id, "paused": state == "paused"},
                    )
                )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        sandbox_id = record["sandbox_id"]
        killed = await self._retry("kill the sandbox", lambda: self._sandbox_cls.kill(sandbox_id))
        return bool(killed)


__all__ = ["CAPABILITIES", "SESSION_KEY", "TAG_KEY", "E2BProvider", "E2BSession"]
