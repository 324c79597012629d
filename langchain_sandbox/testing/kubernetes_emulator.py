"""A local emulator of a Kubernetes cluster running kubernetes-sigs/agent-sandbox, for offline tests.

It speaks the two HTTP surfaces ``k8s-agent-sandbox`` really uses, on ``127.0.0.1``:

* the **Kubernetes API** subset for ``SandboxClaim`` (``extensions.agents.x-k8s.io/v1beta1``) and
  ``Sandbox`` (``agents.x-k8s.io/v1beta1``): create, get, list (label and field selectors),
  delete (with a UID precondition), and watches from a ``resourceVersion``; 404 and 409 answered
  as ``Status`` objects; a bearer token required, as a kubeconfig gives it;
* the **sandbox router and runtime** (``execute``, ``upload``, ``download``, ``exists``, ``list``),
  routed by the ``X-Sandbox-ID`` header to the pod, whose commands run on a real local sandbox
  (bubblewrap by default). See ``_k8s_cluster`` (the API server and controller) and
  ``_k8s_runtime`` (the runtime).

Point the SDK at it with its own configuration only: the kubeconfig the emulator writes
(`KubernetesEmulator.kubeconfig`, or ``KUBECONFIG`` from `KubernetesEmulator.env`) and a direct
connection to ``url``. No SDK internals are patched.

```python
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

with KubernetesEmulator() as cluster:
    provider = cluster.provider()          # a KubernetesProvider pointed here
    ...
    cluster.requests                       # every request answered, in order
    cluster.restart_pod("python-pool-ab12c")   # the pod is lost; the controller starts a new one
```

Faults (`inject`, from the shared request log): a status answered instead of the request, or with
``drop=True`` the request carried out and its connection dropped before the answer (an answer
lost on the way, which a client must not turn into a second sandbox).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_sandbox.providers.base import Provider
from langchain_sandbox.testing import _k8s_runtime
from langchain_sandbox.testing._http_emulator import (
    Fault,
    Handler,
    RecordedRequest,
    Reply,
    RequestLog,
    ServedEmulator,
)
from langchain_sandbox.testing._k8s_cluster import CLAIMS, GROUPS, ApiError, Cluster
from langchain_sandbox.testing._machine_host import MachineHost

DEFAULT_WARM_POOL = "python-sandbox-warmpool"
"""The warm pool the emulated cluster has unless told otherwise."""
DEFAULT_NAMESPACE = "default"
"""The namespace the emulator's helpers look in unless told otherwise."""

_RESOURCE = re.compile(r"/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?")
_RUNTIME = re.compile(r"/(execute|upload|download|exists|list)(?:/(.*))?")
_PLURALS = {(group, version, plural) for plural, (group, version, _) in GROUPS.items()}


class KubernetesEmulator(RequestLog, ServedEmulator):
    """The emulated cluster on ``127.0.0.1:<free port>``; see the module docstring. Its ``url``
    is the API server's and the sandbox router's alike.

    Args:
        machines: The provider whose sessions play the pods (default: the local provider).
        warm_pools: The ``SandboxWarmPool`` names that exist.
        network: Whether code in the pods may reach the network.
        bind_delay: Seconds the controller takes to bind a new claim.
    """

    def __init__(
        self,
        *,
        machines: Provider | None = None,
        warm_pools: tuple[str, ...] = (DEFAULT_WARM_POOL,),
        network: bool = False,
        bind_delay: float = 0.0,
    ) -> None:
        self._machines = machines
        self._warm_pools = set(warm_pools)
        self._network = network
        self._bind_delay = bind_delay
        self._token = secrets.token_urlsafe(24)
        self._init_log()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._host: MachineHost | None = None
        self._cluster: Cluster | None = None
        self._kubeconfig: Path | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> KubernetesEmulator:
        if self._server is not None:
            return self
        self._tmp = tempfile.TemporaryDirectory(prefix="k8s-emulator-")
        self._host = MachineHost("k8s-emulator", self._machines)
        self._cluster = Cluster(
            self._host.loop,
            self._host.machines,
            warm_pools=self._warm_pools,
            network=self._network,
            bind_delay=self._bind_delay,
        )
        self._serve("k8s-emulator")
        self._kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self._kubeconfig.write_text(json.dumps(self._kubeconfig_document()))
        return self

    def close(self) -> None:
        """Stop serving, stop every pod and join the emulator's threads. Idempotent."""
        if self._server is None:
            return
        assert self._cluster is not None
        assert self._host is not None
        self._cluster.close()  # first: it ends the watches the server is holding
        self._stop_serving()
        self._host.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ---- how clients find it ------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig file for the emulated cluster (its server and a bearer token)."""
        if self._kubeconfig is None:
            raise RuntimeError("The emulator is not running.")
        return self._kubeconfig

    def env(self) -> dict[str, str]:
        """The environment a process needs to reach the cluster with the SDK's own defaults."""
        return {"KUBECONFIG": str(self.kubeconfig), "LANGCHAIN_SANDBOX_K8S_RUNTIME_URL": self.url}

    def provider(self, **options: Any) -> Any:
        """A [`KubernetesProvider`][langchain_sandbox.KubernetesProvider] pointed here."""
        from langchain_sandbox.providers.kubernetes import KubernetesProvider

        options.setdefault("warm_pool", DEFAULT_WARM_POOL)
        return KubernetesProvider(kubeconfig=str(self.kubeconfig), runtime_url=self.url, **options)

    def _kubeconfig_document(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "emulated", "user": {"token": self._token}}],
            "contexts": [
                {"name": "emulated", "context": {"cluster": "emulated", "user": "emulated"}}
            ],
            "current-context": "emulated",
        }

    # ---- what tests look at and change --------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("The emulator is not running.")
        return self._cluster

    def claims(self, namespace: str = DEFAULT_NAMESPACE) -> dict[str, dict[str, Any]]:
        """The SandboxClaims that exist, by name."""
        items, _ = self.cluster.listing(CLAIMS, namespace, {}, None)
        return {item["metadata"]["name"]: item for item in items}

    def sandbox_of(self, claim: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        """The name of the Sandbox bound to ``claim``."""
        status = self.cluster.get(CLAIMS, namespace, claim).get("status") or {}
        return str(status["sandbox"]["name"])

    def restart_pod(self, sandbox: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Delete the Sandbox's pod: the controller starts a new, empty one (files and memory
        gone), as after an eviction or a lost node."""
        self.cluster.restart_pod(namespace, sandbox)

    def advance_clock(self, seconds: float) -> None:
        """Move the controller's clock forward: claims whose ``shutdownTime`` it passes are
        deleted, as if that much time had gone by."""
        self.cluster.clock_offset += dt.timedelta(seconds=seconds)

    def delete_claim(self, claim: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Delete a claim as ``kubectl delete sandboxclaim`` (or its shutdown time) would."""
        self.cluster.delete(CLAIMS, namespace, claim, None)

    # ---- HTTP ---------------------------------------------------------------------------------

    def _handle(self, handler: Handler, method: str) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items() if k.lower() != "authorization"}
        fault = self._take_fault(method, url.path)
        if fault is not None and not fault.drop:
            reply = Reply({"message": fault.message}, status=fault.status)
        else:
            try:
                reply = self._answer(handler, method, url.path, parse_qs(url.query), body)
            except ApiError as error:
                reply = Reply(error.status(), status=error.code)
        if fault is not None and fault.drop:
            # Carried out, then the connection drops: the client never hears of it.
            self._record(method, url.path, url.query, 0, headers, body)
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            return
        self._record(method, url.path, url.query, reply.status, headers, body)
        self._send(handler, reply, fault.headers if fault is not None else {})

    def _answer(
        self, handler: Handler, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> Reply:
        resource = _RESOURCE.fullmatch(path)
        if resource is not None:
            if handler.headers.get("authorization", "") != f"Bearer {self._token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            return self._api(method, *resource.groups(), query=query, body=body)
        runtime = _RUNTIME.fullmatch(path)
        if runtime is not None:
            return self._runtime(handler, method, runtime.group(1), runtime.group(2) or "", body)
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")

    def _api(
        self,
        method: str,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str | None,
        *,
        query: dict[str, list[str]],
        body: bytes,
    ) -> Reply:
        if (group, version, plural) not in _PLURALS:
            raise ApiError(404, "NotFound", f"the server could not find {group}/{version} {plural}")
        cluster = self.cluster
        if name is None and method == "POST":
            return Reply(cluster.create(plural, namespace, json.loads(body)), status=201)
        if name is None and method == "GET":
            labels = _selector(query.get("labelSelector", [""])[0])
            named = _selector(query.get("fieldSelector", [""])[0]).get("metadata.name")
            if query.get("watch", [""])[0].lower() in ("true", "1"):
                lines = cluster.watch(
                    plural,
                    namespace,
                    labels,
                    named,
                    query.get("resourceVersion", [None])[0],
                    float(query.get("timeoutSeconds", ["300"])[0]),
                )
                return Reply(events=lines, stream_type="application/json")
            items, version_now = cluster.listing(plural, namespace, labels, named)
            kind = GROUPS[plural][2]
            return Reply(
                {
                    "apiVersion": f"{group}/{version}",
                    "kind": f"{kind}List",
                    "metadata": {"resourceVersion": version_now},
                    "items": items,
                }
            )
        if name is not None and method == "GET":
            return Reply(cluster.get(plural, namespace, name))
        if name is not None and method == "DELETE":
            options = json.loads(body) if body else {}
            uid = (options.get("preconditions") or {}).get("uid")
            return Reply(cluster.delete(plural, namespace, name, uid))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path_of(plural)}")

    def _runtime(self, handler: Handler, method: str, op: str, rest: str, body: bytes) -> Reply:
        sandbox = handler.headers.get("X-Sandbox-ID", "")
        namespace = handler.headers.get("X-Sandbox-Namespace", DEFAULT_NAMESPACE)
        pod = self.cluster.pod(namespace, sandbox)
        if pod is None:
            return Reply({"message": f"Sandbox {namespace}/{sandbox} not found"}, status=404)
        run: Callable[[Any], Any] = self.cluster._loop.run_sync
        content_type = handler.headers.get("content-type", "")
        if method == "POST" and op == "execute":
            return _k8s_runtime.execute(run, pod, body)
        if method == "POST" and op == "upload":
            return _k8s_runtime.upload(run, pod, body, content_type)
        if method == "GET" and op == "download":
            return _k8s_runtime.download(run, pod, rest)
        if method == "GET" and op == "exists":
            return _k8s_runtime.exists(run, pod, rest)
        if method == "GET" and op == "list":
            return _k8s_runtime.listing(run, pod, rest)
        return Reply({"detail": "Method Not Allowed"}, status=405)


@contextlib.asynccontextmanager
async def emulated_kubernetes_provider(**options: Any) -> AsyncIterator[Any]:
    """A ready [`KubernetesProvider`][langchain_sandbox.KubernetesProvider] on a fresh emulated
    cluster (stopped, with every pod, on exit). ``options`` go to the provider."""
    async with KubernetesEmulator() as cluster:
        provider = cluster.provider(**options)
        try:
            yield provider
        finally:
            await provider.aclose()


def path_of(plural: str) -> str:
    return f"{GROUPS[plural][0]}/{plural}"


def _selector(text: str) -> dict[str, str]:
    """``a=b,c==d`` as a dict (equality selectors: all the SDK sends)."""
    selector: dict[str, str] = {}
    for term in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = term.partition("=")
        selector[key] = value.lstrip("=")
    return selector


__all__ = [
    "DEFAULT_WARM_POOL",
    "Fault",
    "KubernetesEmulator",
    "RecordedRequest",
    "emulated_kubernetes_provider",
]
