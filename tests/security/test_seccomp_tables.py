"""The seccomp allow-list's tables against Docker's default profile and against the docs.

Docker's profile (``docker_default_seccomp.json``, moby 20.10.24, see its README) is compared call
by call for each 64-bit ABI it and the table cover: a call Docker allows that is refused here is
fine but must be named in ``REFUSED_HERE_ALLOWED_BY_DOCKER`` (so the docs say so); a call allowed
here that Docker refuses, or allows only with a capability or with given arguments, must be named
in ``ALLOWED_HERE_NOT_BY_DOCKER`` with its reason. Any unnamed difference fails.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pyseccomp
import pytest

from langchain_sandbox.providers.local._syscall_docs import markdown_table
from langchain_sandbox.providers.local._syscall_table import (
    ALLOWED,
    ALLOWED_HERE_NOT_BY_DOCKER,
    CHECKED,
    PERSONALITIES,
    REFUSED,
    REFUSED_HERE_ALLOWED_BY_DOCKER,
    masked_complement,
)

_DOCKER = json.loads((Path(__file__).parent / "docker_default_seccomp.json").read_text())
_DOCS = Path(__file__).parents[2] / "docs" / "isolation.md"
# Docker's architecture names for libseccomp's.
_ABIS = {"amd64": pyseccomp.Arch.X86_64, "arm64": pyseccomp.Arch.AARCH64}
# Calls newer than the libseccomp of the development machine (2.5.4): the builder leaves out a
# name libseccomp does not know (the call is then refused), so any other unknown name is a typo.
_NEWER_THAN_LIBSECCOMP = {"statmount", "listmount"}


def _docker_rules(abi: str) -> tuple[set[str], dict[str, list[dict[str, object]]]]:
    """Docker's calls for ``abi``: those allowed outright, and those allowed with argument checks.

    A rule that needs a capability does not count: a container has none of those by default
    (``CAP_SYS_ADMIN``, ``CAP_SYS_PTRACE``...). A rule that needs a minimum kernel counts.
    """
    allowed: set[str] = set()
    checked: dict[str, list[dict[str, object]]] = {}
    for rule in _DOCKER["syscalls"]:
        includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
        if rule["action"] != "SCMP_ACT_ALLOW" or includes.get("caps"):
            continue
        if includes.get("arches") and abi not in includes["arches"]:
            continue
        if abi in (excludes.get("arches") or ()):
            continue
        for name in rule["names"]:
            if rule.get("args"):
                checked.setdefault(name, []).extend(rule["args"])
            else:
                allowed.add(name)
    return allowed, checked


def _on(arch: int, names: set[str]) -> set[str]:
    return {name for name in names if pyseccomp.resolve_syscall(arch, name) >= 0}


def _ours() -> tuple[set[str], set[str]]:
    allowed = {call for group in ALLOWED for call in group.calls}
    checked = {call for check in CHECKED for call in check.calls}
    return allowed, checked


@pytest.mark.parametrize("abi", sorted(_ABIS))
def test_every_call_allowed_here_and_not_by_docker_is_listed_with_a_reason(abi: str) -> None:
    arch = _ABIS[abi]
    docker_allowed, docker_checked = _docker_rules(abi)
    allowed, checked = _ours()
    beyond_docker = _on(
        arch, (allowed - docker_allowed) | (checked - docker_allowed - set(docker_checked))
    )
    assert beyond_docker == _on(arch, set(ALLOWED_HERE_NOT_BY_DOCKER))
    assert all(reason.strip() for reason in ALLOWED_HERE_NOT_BY_DOCKER.values())


@pytest.mark.parametrize("abi", sorted(_ABIS))
def test_every_call_docker_allows_and_refused_here_is_listed(abi: str) -> None:
    arch = _ABIS[abi]
    docker_allowed, docker_checked = _docker_rules(abi)
    allowed, checked = _ours()
    refused_here = _on(arch, (docker_allowed | set(docker_checked)) - allowed - checked)
    assert refused_here == _on(arch, set(REFUSED_HERE_ALLOWED_BY_DOCKER))
    refused = {call for group in REFUSED for call in group.calls}
    assert refused >= REFUSED_HERE_ALLOWED_BY_DOCKER, "each needs a group that says why"


def test_the_argument_checks_docker_has_are_at_least_as_strict_here() -> None:
    _allowed, docker_checked = _docker_rules("amd64")
    assert set(docker_checked) == {"clone", "personality"}
    clone = next(check for check in CHECKED if check.name == "clone")
    (rule,) = clone.rules
    ((_argument, our_mask, value),) = rule.conditions
    (docker_clone,) = docker_checked["clone"]
    assert docker_clone["op"] == "SCMP_CMP_MASKED_EQ"
    docker_mask = int(docker_clone["value"])  # type: ignore[call-overload]
    assert value == 0
    assert our_mask & docker_mask == docker_mask
    docker_personalities = {int(arg["value"]) for arg in docker_checked["personality"]}  # type: ignore[call-overload]
    assert set(PERSONALITIES) <= docker_personalities


def test_no_call_is_in_two_places_and_every_name_is_a_real_call() -> None:
    places = [group.calls for group in (*ALLOWED, *REFUSED)] + [check.calls for check in CHECKED]
    names = [call for calls in places for call in calls]
    assert len(names) == len(set(names))
    unknown = {
        name
        for name in names
        if all(pyseccomp.resolve_syscall(arch, name) == -1 for arch in _ABIS.values())
    }
    assert unknown <= _NEWER_THAN_LIBSECCOMP


def test_masked_complement_matches_exactly_the_other_values() -> None:
    sample = random.Random(18)
    for values in ((0x5412, 0x541C), (1, 2, 10, 16), (0,), (0xFFFFFFFF, 7)):
        pairs = masked_complement(values)
        probes = [*values, *(value ^ (1 << bit) for value in values for bit in range(32))]
        probes += [sample.getrandbits(32) for _ in range(20_000)] + list(range(64))
        for probe in probes:
            matches = sum(1 for mask, value in pairs if probe & mask == value)
            assert matches == (0 if probe in values else 1), (values, hex(probe))


def test_the_docs_table_is_the_one_generated_from_the_filter() -> None:
    found = re.search(
        r"<!-- syscall table: generated.*?-->\n(.*?)<!-- end of the syscall table -->",
        _DOCS.read_text(),
        re.DOTALL,
    )
    assert found, "docs/isolation.md must hold the generated syscall table between its markers"
    assert found.group(1) == markdown_table(), (
        "regenerate it: python -m langchain_sandbox.providers.local._syscall_docs"
    )
