"""The system call table of ``docs/isolation.md``, rendered from the filter's own tables.

``python -m langchain_sandbox.providers.local._syscall_docs`` prints it; a test checks that the
committed page holds exactly this table, so the docs cannot drift from the filter.
"""

from __future__ import annotations

import errno

from langchain_sandbox.providers.local._syscall_table import (
    ALLOWED,
    ALLOWED_HERE_NOT_BY_DOCKER,
    CHECKED,
    DEFAULT_ERRNO,
    REFUSED,
    REFUSED_HERE_ALLOWED_BY_DOCKER,
    SyscallGroup,
)


def _calls(calls: tuple[str, ...]) -> str:
    return ", ".join(f"`{call}`" for call in calls)


def _verdict(refusal: int | None) -> str:
    return "allowed" if refusal is None else f"`{errno.errorcode[refusal]}`"


def _docker_view(group: SyscallGroup) -> str:
    if group.errno is None:
        differ = [call for call in group.calls if call in ALLOWED_HERE_NOT_BY_DOCKER]
        return f"refuses {_calls(tuple(differ))}, allows the rest" if differ else "allows"
    differ = [call for call in group.calls if call in REFUSED_HERE_ALLOWED_BY_DOCKER]
    return f"allows {_calls(tuple(differ))}" if differ else "refuses (or needs a capability)"


def markdown_table() -> str:
    """The system call table of ``docs/isolation.md``, generated from the filter's own tables."""
    lines = [
        "| group | calls | here | Docker's default profile | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for group in ALLOWED:
        row = (group.name, _calls(group.calls), "allowed", _docker_view(group), group.why)
        lines.append("| " + " | ".join(row) + " |")
    for check in CHECKED:
        row = (
            check.name,
            _calls(check.calls),
            f"allowed with {check.allowed_when}",
            check.docker,
            check.why,
        )
        lines.append("| " + " | ".join(row) + " |")
    for group in REFUSED:
        row = (
            group.name,
            _calls(group.calls),
            _verdict(group.errno),
            _docker_view(group),
            group.why,
        )
        lines.append("| " + " | ".join(row) + " |")
    lines.append(
        f"| everything else | every other call, of this ABI or one this table does not name | "
        f"{_verdict(DEFAULT_ERRNO)} | `EPERM` | an allow-list: a kernel interface nobody has "
        f"listed stays out of reach |"
    )
    lines.append(
        "| other ABIs | 32-bit (`int 0x80`) and x32 calls | the process is killed | allowed (its "
        "own table per ABI) | nothing a Python sandbox runs needs another ABI |"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")


__all__ = ["markdown_table"]
