"""The fenced code blocks of a Markdown page, with what the snippet test does with each.

A block's info string says what it is:

* ``python``: runs. The Python blocks of one page run in order, in one namespace, in a fresh
  interpreter of their own (a page reads like one script; pages never see each other's names).
* ``bash``/``sh``/``shell``: commands a user types. They run with ``bash -e`` in the same scratch
  directory, with the interpreter's ``bin`` (so ``langchain-sandbox``) first on ``PATH``.
* ``text``/``console``/``json``/``toml``/``yaml``/``ini``: output, transcripts, data; not code.

A block preceded by the line ``<!-- not-run: <reason> -->`` is skipped by design and reported with
its reason. A fence without an info string, an unknown info string, a marker without a reason or a
marker that stands above no code block is an error: every block says what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"bash", "sh", "shell"})
NOT_CODE = frozenset({"text", "console", "json", "toml", "yaml", "yml", "ini"})

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
_MARKER_START = re.compile(r"^\s*<!--\s*not-run\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language, its code and why it does not run."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


class MarkdownError(ValueError):
    """The page breaks a rule of the snippet test (see the module docstring)."""


def blocks(page: Path, root: Path) -> list[Block]:
    """Every fenced block of ``page`` in page order; raises :class:`MarkdownError` on a bad one.

    Blocks and errors name the page relative to ``root``.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    path = page.relative_to(root)
    found: list[Block] = []
    pending: tuple[int, str] | None = None  # a not-run marker waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE.match(line)
        if opening is None:
            if _MARKER_START.match(line):
                marker = _MARKER.match(line)
                reason = marker.group("reason").strip() if marker else ""
                if not reason:
                    raise MarkdownError(f"{path}:{index + 1}: a not-run marker needs a reason")
                pending = (index + 1, reason)
            elif pending is not None and line.strip():
                raise MarkdownError(
                    f"{path}:{pending[0]}: the not-run marker must be the line directly above a fence"
                )
            index += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        language = opening.group("info").lower()
        body: list[str] = []
        index += 1
        while index < len(lines) and not re.match(
            rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[index]
        ):
            body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
            index += 1
        start = index - len(body)  # 1-based line of the opening fence
        if index >= len(lines):
            raise MarkdownError(f"{path}:{start}: the code block is never closed")
        index += 1
        if not language:
            raise MarkdownError(
                f"{path}:{start}: a fence needs an info string (python, bash, text, console, ...)"
            )
        if language not in PYTHON | SHELL | NOT_CODE:
            raise MarkdownError(f"{path}:{start}: unknown info string {language!r}")
        not_run = None
        if pending is not None:
            if pending[0] != start - 1:
                raise MarkdownError(
                    f"{path}:{pending[0]}: the not-run marker must be the line directly above a fence"
                )
            if language in NOT_CODE:
                raise MarkdownError(
                    f"{path}:{pending[0]}: a not-run marker above a {language!r} block, which never runs"
                )
            not_run, pending = pending[1], None
        found.append(Block(path, start, language, "\n".join(body) + "\n", not_run))
    if pending is not None:
        raise MarkdownError(f"{path}:{pending[0]}: the not-run marker stands above no code block")
    return found
