"""Attack class 2: the kernel keyring, which user namespaces do not separate.

The host (this test process) adds a key to its user keyring with the ``add_key`` system call;
sandboxed code then tries the four attacks the red team made: read the host's key, plant a key the
host finds, pass a message to another live session through the keyring, and exhaust the key quota.
"""

from __future__ import annotations

import ctypes
import json
import uuid
from collections.abc import Iterator

import pyseccomp
import pytest

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession

_KEY_SPEC_USER_KEYRING = -4
_KEYCTL_REVOKE = 3
_KEYCTL_SEARCH = 10

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _number(name: str) -> int:
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    assert number >= 0
    return number


_NUMBERS = {name: _number(name) for name in ("add_key", "keyctl")}

# The sandbox's side: the same system calls, by number (its Python has no keyring binding either).
_KEYRING_CLIENT = (
    f"ADD_KEY, KEYCTL = {_NUMBERS['add_key']}, {_NUMBERS['keyctl']}\n"
    + r"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
USER_KEYRING, KEYCTL_GET_KEYRING_ID, KEYCTL_READ, KEYCTL_SEARCH = -4, 0, 11, 10
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_LINK = 1, 8

def call(number, *args):
    result = libc.syscall(number, *args)
    return (result, None) if result >= 0 else (None, errno.errorcode.get(ctypes.get_errno(), "?"))

def search(description):
    return call(KEYCTL, ctypes.c_long(KEYCTL_SEARCH), ctypes.c_long(USER_KEYRING), b"user",
                description.encode(), ctypes.c_long(0))

def read(key):
    buffer = ctypes.create_string_buffer(4096)
    size, error = call(KEYCTL, ctypes.c_long(KEYCTL_READ), ctypes.c_long(key), buffer,
                       ctypes.c_long(4096))
    return (buffer.raw[:size].decode(errors="replace"), None) if error is None else (None, error)

def add(description, payload):
    return call(ADD_KEY, b"user", description.encode(), payload.encode(),
                ctypes.c_size_t(len(payload)), ctypes.c_long(USER_KEYRING))

def proc_keys():
    try:
        with open("/proc/keys") as handle:
            return handle.read()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, "?")

def listed(kind):
    # {description: id} of the keys of one type that /proc/keys shows (the host's included).
    found = {}
    for line in proc_keys().splitlines():
        fields = line.split(None, 8)
        if len(fields) == 9 and fields[7] == kind:
            found[fields[8].split(":")[0]] = int(fields[0], 16)
    return found

def add_everywhere(description, payload):
    # Add a key to the own user keyring and to every keyring /proc/keys shows; the errors.
    errors = set()
    for keyring in [USER_KEYRING, *listed("keyring").values()]:
        errors.add(call(ADD_KEY, b"user", description.encode(), payload.encode(),
                        ctypes.c_size_t(len(payload)), ctypes.c_long(keyring))[1])
    return sorted(errors, key=str)
"""
)


def _host_add_key(description: str, payload: bytes) -> int:
    result = _libc.syscall(
        _NUMBERS["add_key"],
        b"user",
        description.encode(),
        payload,
        ctypes.c_size_t(len(payload)),
        ctypes.c_long(_KEY_SPEC_USER_KEYRING),
    )
    assert result >= 0, f"the host could not add a key: errno {ctypes.get_errno()}"
    return int(result)


def _host_search(description: str) -> int | None:
    result = _libc.syscall(
        _NUMBERS["keyctl"],
        ctypes.c_long(_KEYCTL_SEARCH),
        ctypes.c_long(_KEY_SPEC_USER_KEYRING),
        b"user",
        description.encode(),
        ctypes.c_long(0),
    )
    return int(result) if result >= 0 else None


def _host_revoke(key: int) -> None:
    _libc.syscall(_NUMBERS["keyctl"], ctypes.c_long(_KEYCTL_REVOKE), ctypes.c_long(key))


@pytest.fixture
def host_key() -> Iterator[tuple[str, str, int]]:
    """A secret key in the host user's keyring: (description, payload, key id)."""
    description = f"lcsbx-host-secret-{uuid.uuid4().hex}"
    payload = f"payload-{uuid.uuid4().hex}"
    key = _host_add_key(description, payload.encode())
    try:
        yield description, payload, key
    finally:
        _host_revoke(key)


async def _run(session: LocalSession, code: str) -> dict[str, object]:
    result = await session.run_code(_KEYRING_CLIENT + code)
    assert result.ok, result.render()
    return dict(json.loads(result.stdout))


async def test_the_hosts_keys_cannot_be_read(
    session: LocalSession, host_key: tuple[str, str, int]
) -> None:
    description, payload, key = host_key
    found = await _run(
        session,
        f"""
by_listing = listed("user").get({description!r})
content_by_listing = read(by_listing)[0] if by_listing is not None else None
# /proc/keys hidden or not, key ids are small integers an attacker can guess.
content_by_id, read_error = read({key})
linked, link_error = call(KEYCTL, ctypes.c_long(KEYCTL_LINK), ctypes.c_long({key}),
                          ctypes.c_long(USER_KEYRING))
key, search_error = search({description!r})
print(json.dumps({{"by_listing": content_by_listing, "by_id": content_by_id,
                  "read": read_error, "link": link_error, "search": search_error,
                  "proc_keys": proc_keys()}}))
""",
    )
    assert found["by_listing"] is None
    assert found["by_id"] is None
    assert found["read"] == "ENOSYS"
    assert found["link"] == "ENOSYS"
    assert found["search"] == "ENOSYS"
    # bubblewrap masks the host's /proc/keys (an empty file, like every host-wide /proc file);
    # gVisor's own /proc has no keyring view at all.
    assert found["proc_keys"] == ("ENOENT" if session.launcher.isolation == "gvisor" else "")
    assert description not in json.dumps(found)
    assert payload not in json.dumps(found)


async def test_keys_planted_inside_never_reach_the_host(session: LocalSession) -> None:
    description = f"lcsbx-planted-{uuid.uuid4().hex}"
    found = await _run(
        session,
        f"print(json.dumps({{'errors': add_everywhere({description!r}, 'planted')}}))",
    )
    assert found["errors"] == ["ENOSYS"]
    planted = _host_search(description)
    if planted is not None:
        _host_revoke(planted)
    assert planted is None


async def test_two_sessions_cannot_talk_through_the_keyring(provider: LocalProvider) -> None:
    description = f"lcsbx-channel-{uuid.uuid4().hex}"
    spec = SessionSpec(limits=Limits(timeout=60.0))
    async with await provider.create(spec) as sender, await provider.create(spec) as receiver:
        sent = await _run(
            sender,
            f"print(json.dumps({{'errors': add_everywhere({description!r}, 'hello')}}))",
        )
        received = await _run(
            receiver,
            f"""
key, error = search({description!r})
key = listed("user").get({description!r}, key)
content = read(key)[0] if key is not None else None
print(json.dumps({{"error": error, "content": content, "proc_keys": proc_keys()}}))
""",
        )
    assert sent["errors"] == ["ENOSYS"]
    assert received["error"] == "ENOSYS"
    assert received["content"] is None
    assert description not in str(received["proc_keys"])
    leaked = _host_search(description)
    if leaked is not None:
        _host_revoke(leaked)
    assert leaked is None


async def test_the_key_quota_cannot_be_exhausted(session: LocalSession) -> None:
    found = await _run(
        session,
        """
added, errors = 0, set()
for index in range(2000):
    key, error = add(f"lcsbx-flood-{index}", "x" * 1024)
    if error is not None:
        errors.add(error)
        break
    added += 1
print(json.dumps({"added": added, "errors": sorted(errors)}))
""",
    )
    assert found == {"added": 0, "errors": ["ENOSYS"]}
    # The host user can still add keys (none of the flood is in its keyring).
    probe = f"lcsbx-after-flood-{uuid.uuid4().hex}"
    _host_revoke(_host_add_key(probe, b"still works"))
    assert _host_search("lcsbx-flood-0") is None
