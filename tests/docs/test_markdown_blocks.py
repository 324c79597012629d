"""The rules of the snippet test's Markdown reader: what runs, what is skipped, what is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from .markdown_blocks import Block, MarkdownError, blocks


def _page(tmp_path: Path, text: str) -> list[Block]:
    (tmp_path / "page.md").write_text(text)
    return blocks(tmp_path / "page.md", tmp_path)


def test_blocks_in_page_order_with_language_line_and_reason(tmp_path: Path) -> None:
    found = _page(
        tmp_path,
        "# t\n\n```python\nx = 1\n```\n\n<!-- not-run: needs a key -->\n```bash\nexit 1\n```\n"
        "\n- item\n\n  ```text\n  out\n  ```\n",
    )
    assert [(b.line, b.language, b.code, b.not_run) for b in found] == [
        (3, "python", "x = 1\n", None),
        (8, "bash", "exit 1\n", "needs a key"),
        (14, "text", "out\n", None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- not-run: -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- not-run -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- not-run: r -->\n\n```python\nx\n```\n", "directly above a fence"),
        ("<!-- not-run: r -->\ntext\n", "directly above a fence"),
        ("<!-- not-run: r -->\n", "above no code block"),
        ("<!-- not-run: r -->\n```text\nx\n```\n", "never runs"),
        ("```\nx\n```\n", "needs an info string"),
        ("```rust\nx\n```\n", "unknown info string"),
        ("```python\nx\n", "never closed"),
    ],
)
def test_bad_pages_are_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(MarkdownError, match=message):
        _page(tmp_path, text)
