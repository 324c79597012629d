"""The state behind the Kubernetes emulator: SandboxClaims, Sandboxes, their pods, and watches.

It plays the API server for the two custom resources ``k8s-agent-sandbox`` uses (objects with
``uid``/``resourceVersion``, one resource-version counter, an event history that watches replay
from a version, 404/409 answers) and the agent-sandbox controller: a new claim is bound in the
background to a Sandbox adopted from its warm pool (named ``<pool>-<suffix>``, as warm-pool
adoption names them), whose pod is a real session of a local provider, so commands run for real.
Deleting a claim deletes its Sandbox and pod; a claim past its ``lifecycle.shutdownTime`` with
policy ``Delete`` is deleted by the controller; a deleted pod is started again, empty, under the
same Sandbox (the controller keeps one pod per Sandbox), with a new IP.

Thread-safe: HTTP handler threads call in; the local provider runs on the emulator's loop thread.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_sandbox.core._event_loop import LoopThread
from langchain_sandbox.providers.base import Limits, Provider, Session, SessionSpec

CLAIMS = "sandboxclaims"
SANDBOXES = "sandboxes"
GROUPS = {
    CLAIMS: ("extensions.agents.x-k8s.io", "v1beta1", "SandboxClaim"),
    SANDBOXES: ("agents.x-k8s.io", "v1beta1", "Sandbox"),
}
_POD_LIMIT_SECONDS = 24 * 3600.0
_REAP_EVERY = 0.2


class ApiError(Exception):
    """A Kubernetes ``Status`` failure: HTTP code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Pod:
    """The pod behind one Sandbox: its IP and the machine that runs its commands."""

    name: str
    ip: str
    machine: Session


class Cluster:
    """One emulated namespace-aware API server plus the agent-sandbox controller.

    Args:
        loop: The emulator's event-loop thread (the machines' async API runs there).
        machines: The provider whose sessions play the pods.
        warm_pools: Names of the ``SandboxWarmPool``s that exist; a claim naming another is
            answered with the controller's ``WarmPoolNotFound`` condition.
        network: Whether code in the pods may reach the network.
        bind_delay: Seconds before the controller binds a new claim (a cold start).
    """

    def __init__(
        self,
        loop: LoopThread,
        machines: Provider,
        *,
        warm_pools: set[str],
        network: bool,
        bind_delay: float = 0.0,
    ) -> None:
        self._loop = loop
        self._machines = machines
        self.warm_pools = warm_pools
        self._network = network
        self.bind_delay = bind_delay
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self._version = itertools.count(1)
        self._ips = itertools.count(2)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.pods: dict[tuple[str, str], Pod] = {}
        self.closing = False
        self.clock_offset = dt.timedelta()
        self._reaper = threading.Thread(target=self._reap, name="k8s-emulator-reaper", daemon=True)
        self._reaper.start()

    # ---- objects ------------------------------------------------------------------------------

    def _store(self, plural: str, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        """Record a change: a new resourceVersion, the object stored, an event for watches."""
        with self.changed:
            version = next(self._version)
            obj["metadata"]["resourceVersion"] = str(version)
            key = (plural, obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.history.append((version, plural, kind, copy.deepcopy(obj)))
            self.changed.notify_all()
            return copy.deepcopy(obj)

    def create(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name is required")
        group, version, kind = GROUPS[plural]
        with self._lock:
            if (plural, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
            obj = copy.deepcopy(body)
            obj.update(apiVersion=f"{group}/{version}", kind=kind)
            obj["metadata"].update(
                namespace=namespace,
                uid=str(uuid.uuid4()),
                creationTimestamp=_now(),
                generation=1,
            )
            obj.setdefault("status", {})
            created = self._store(plural, obj, "ADDED")
        if plural == CLAIMS:
            threading.Thread(
                target=self._bind, args=(namespace, name), name="k8s-emulator-bind", daemon=True
            ).start()
        return created

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                group = GROUPS[plural][0]
                raise ApiError(404, "NotFound", f'{plural}.{group} "{name}" not found')
            return copy.deepcopy(obj)

    def listing(
        self, plural: str, namespace: str, labels: dict[str, str], name: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        """The matching objects and the list's resourceVersion."""
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (kind, ns, _), obj in sorted(self.objects.items())
                if kind == plural and ns == namespace and _matches(obj, labels, name)
            ]
            return items, str(self.history[-1][0] if self.history else 0)

    def delete(self, plural: str, namespace: str, name: str, uid: str | None) -> dict[str, Any]:
        with self._lock:
            obj = self.get(plural, namespace, name)
            if uid is not None and obj["metadata"]["uid"] != uid:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
            obj["metadata"]["deletionTimestamp"] = _now()
            deleted = self._store(plural, obj, "DELETED")
        if plural == CLAIMS:
            sandbox = (obj.get("status") or {}).get("sandbox", {}).get("name")
            if sandbox:
                with contextlib.suppress(ApiError):
                    self.delete(SANDBOXES, namespace, sandbox, None)
        else:
            self._stop_pod(namespace, name)
        return deleted

    def watch(
        self,
        plural: str,
        namespace: str,
        labels: dict[str, str],
        name: str | None,
        since: str | None,
        timeout: float,
    ) -> Iterator[str]:
        """The lines of a watch: from ``since`` (``"0"``/none: the current objects as ADDED
        first), every later change of a matching object, until ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if since in (None, "", "0"):
                items, current = self.listing(plural, namespace, labels, name)
                start = int(current)
                initial = [{"type": "ADDED", "object": item} for item in items]
            else:
                start, initial = int(since), []
        for event in initial:
            yield json.dumps(event) + "\n"
        seen = start
        while True:
            with self.changed:
                while not self.closing and (not self.history or self.history[-1][0] <= seen):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self.changed.wait(min(remaining, 0.5))
                if self.closing:
                    return
                fresh = [entry for entry in self.history if entry[0] > seen]
                seen = fresh[-1][0]
            for _, kind_plural, kind, obj in fresh:
                if (
                    kind_plural == plural
                    and obj["metadata"]["namespace"] == namespace
                    and _matches(obj, labels, name)
                ):
                    yield json.dumps({"type": kind, "object": obj}) + "\n"

    def _update_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        with self._lock:
            try:
                obj = self.get(plural, namespace, name)
            except ApiError:
                return
            obj["status"] = status
            self._store(plural, obj, "MODIFIED")

    # ---- the controller -----------------------------------------------------------------------

    def _bind(self, namespace: str, claim_name: str) -> None:
        """What the claim controller does with a new claim: adopt a Sandbox from its pool."""
        time.sleep(self.bind_delay)
        try:
            claim = self.get(CLAIMS, namespace, claim_name)
        except ApiError:
            return
        pool = claim["spec"].get("warmPoolRef", {}).get("name", "")
        if pool not in self.warm_pools:
            self._update_status(
                CLAIMS,
                namespace,
                claim_name,
                {"conditions": [_ready("False", "WarmPoolNotFound", f"{pool} not found")]},
            )
            return
        sandbox_name = f"{pool}-{uuid.uuid4().hex[:5]}"
        pod_spec = claim["spec"].get("additionalPodMetadata") or {}
        sandbox = {
            "metadata": {
                "name": sandbox_name,
                "labels": dict(pod_spec.get("labels") or {}),
                "annotations": dict(pod_spec.get("annotations") or {}),
                "ownerReferences": [
                    {"kind": "SandboxClaim", "name": claim_name, "uid": claim["metadata"]["uid"]}
                ],
            },
            "spec": {"podTemplate": {"spec": {}}, "operatingMode": "Running"},
        }
        self.create(SANDBOXES, namespace, sandbox)
        try:
            pod = self._start_pod(namespace, sandbox_name)
        except Exception as exc:
            self._update_status(
                CLAIMS,
                namespace,
                claim_name,
                {"conditions": [_ready("False", "PodFailed", str(exc))]},
            )
            return
        self._update_status(SANDBOXES, namespace, sandbox_name, _sandbox_status(pod))
        self._update_status(
            CLAIMS,
            namespace,
            claim_name,
            {
                "sandbox": {"name": sandbox_name, "podIPs": [pod.ip]},
                "conditions": [_ready("True", "SandboxReady", "")],
            },
        )

    def _start_pod(self, namespace: str, sandbox: str) -> Pod:
        spec = SessionSpec(
            network=self._network,
            limits=Limits(timeout=_POD_LIMIT_SECONDS, max_output_bytes=64 * 1024 * 1024),
        )
        machine = self._loop.run_sync(self._machines.create(spec))
        number = next(self._ips)
        pod = Pod(name=sandbox, ip=f"10.0.{number // 250}.{number % 250 + 2}", machine=machine)
        with self._lock:
            if self.closing or (SANDBOXES, namespace, sandbox) not in self.objects:
                self._close(machine)
                raise ApiError(404, "NotFound", f"sandbox {sandbox} went away while starting")
            self.pods[(namespace, sandbox)] = pod
        return pod

    def _stop_pod(self, namespace: str, sandbox: str) -> None:
        with self._lock:
            pod = self.pods.pop((namespace, sandbox), None)
        if pod is not None:
            self._close(pod.machine)

    def _close(self, machine: Session) -> None:
        with contextlib.suppress(Exception):
            self._loop.run_sync(machine.close())

    def pod(self, namespace: str, sandbox: str) -> Pod | None:
        with self._lock:
            return self.pods.get((namespace, sandbox))

    def restart_pod(self, namespace: str, sandbox: str) -> None:
        """The pod is deleted (evicted, its node lost); the controller starts a new, empty one."""
        self.get(SANDBOXES, namespace, sandbox)
        self._stop_pod(namespace, sandbox)
        self._update_status(
            SANDBOXES, namespace, sandbox, {"conditions": [_ready("False", "PodNotReady", "")]}
        )
        pod = self._start_pod(namespace, sandbox)
        self._update_status(SANDBOXES, namespace, sandbox, _sandbox_status(pod))

    def _reap(self) -> None:
        """Delete claims whose ``lifecycle.shutdownTime`` passed, with policy ``Delete``."""
        while not self.closing:
            time.sleep(_REAP_EVERY)
            now = dt.datetime.now(dt.UTC) + self.clock_offset
            with self._lock:
                due = [
                    (ns, name)
                    for (plural, ns, name), obj in self.objects.items()
                    if plural == CLAIMS and _expired(obj, now)
                ]
            for namespace, name in due:
                with contextlib.suppress(ApiError):
                    self.delete(CLAIMS, namespace, name, None)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.changed.wait(min(remaining, 0.5))
            return True

    def close(self) -> None:
        """Stop every watch and every pod."""
        with self.changed:
            self.closing = True
            self.changed.notify_all()
            pods = list(self.pods.values())
            self.pods.clear()
        for pod in pods:
            self._close(pod.machine)


def _ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _now(),
    }


def _sandbox_status(pod: Pod) -> dict[str, Any]:
    return {
        "conditions": [_ready("True", "DependenciesReady", "")],
        "podIPs": [pod.ip],
        "serviceFQDN": f"{pod.name}.svc.cluster.local",
    }


def _matches(obj: dict[str, Any], labels: dict[str, str], name: str | None) -> bool:
    metadata = obj["metadata"]
    if name is not None and metadata["name"] != name:
        return False
    have = metadata.get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def _expired(claim: dict[str, Any], now: dt.datetime) -> bool:
    lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
    when = lifecycle.get("shutdownTime")
    if not when or lifecycle.get("shutdownPolicy", "Delete") != "Delete":
        return False
    return dt.datetime.fromisoformat(when.replace("Z", "+00:00")) <= now


__all__ = ["CLAIMS", "GROUPS", "SANDBOXES", "ApiError", "Cluster", "Pod"]
