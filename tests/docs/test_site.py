"""The documentation site builds with no warning, documents every public name, renders the
notebooks, and the README's links (read on a package index, far from this tree) resolve."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE_URL = "https://langchain-sandbox.github.io/langchain-sandbox/"
REPO_URL = "https://github.com/langchain-sandbox/langchain-sandbox"
PUBLIC_MODULES = (
    "langchain_sandbox",
    "langchain_sandbox.testing",
    "langchain_sandbox.testing.e2b_emulator",
    "langchain_sandbox.testing.runloop_emulator",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if "MKDOCS_2_WARNING" not in k},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    # The theme's releases from 9.7.2 on print an end-of-life banner on every build unless an
    # environment variable is set; the pin in pyproject.toml keeps the plain `mkdocs build` quiet.
    assert "Zensical" not in done.stderr, done.stderr[:2000]
    assert "end of life" not in done.stderr, done.stderr[:2000]
    return out


def test_the_reference_documents_every_public_name(site: Path) -> None:
    anchors = set()
    for page in (site / "reference").rglob("index.html"):
        anchors |= set(re.findall(r'id="([\w.]+)"', page.read_text()))
    public = [
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
    ]
    assert len(public) > 50
    assert [name for name in public if name not in anchors] == []


def test_the_notebooks_are_rendered_with_their_outputs(site: Path) -> None:
    quickstart = (site / "cookbook" / "quickstart" / "index.html").read_text()
    assert "HOME = /home/user" in quickstart  # a committed output, not only the code
    assert "data:image/png;base64" in quickstart  # the chart
    for name in ("durable_sessions", "providers"):
        assert (site / "cookbook" / name / "index.html").exists()


def test_readme_links_resolve_away_from_the_repository(site: Path) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links
    for link in links:
        if link.startswith(SITE_URL):
            path, _, anchor = link.removeprefix(SITE_URL).partition("#")
            page = site / path / "index.html" if not (site / path).is_file() else site / path
            assert page.exists(), link
            assert not anchor or f'id="{anchor}"' in page.read_text(), link
        elif link.startswith(REPO_URL):
            kind, _, path = link.removeprefix(REPO_URL + "/").partition("/main/")
            assert kind in ("tree", "blob"), link
            assert (ROOT / path).exists(), link
        else:
            assert link.startswith("https://"), f"{link}: a relative link breaks on a package index"


def _constructor_parameters(cls: type) -> list[str]:
    """What a constructor takes: a pydantic model's fields declared by this package (inherited
    ones included), else the keyword parameters of ``__init__``."""
    from pydantic import BaseModel

    from langchain_sandbox.core.arguments import parameter_names

    if issubclass(cls, BaseModel):
        return [
            name
            for name in cls.model_fields
            if any(
                name in vars(base).get("__annotations__", {})
                for base in cls.__mro__
                if base.__module__.startswith("langchain_sandbox")
            )
        ]
    return parameter_names(cls.__init__)  # type: ignore[misc]


def _section(page: str, anchor: str) -> str:
    """The rendered text of one documented object, from its heading to the next one's."""
    start = page.index(f'id="{anchor}"')
    following = re.search(r'<h2 id="langchain_sandbox\.', page[start + 10 :])
    end = start + 10 + following.start() if following else len(page)
    return re.sub(r"<[^>]+>", " ", page[start:end])


def test_every_public_constructor_documents_its_parameters(site: Path) -> None:
    """Each constructor's parameters (a tool's inherited ones included) appear on its page, with
    their type and default for the pydantic models, whose generated ``__init__`` has neither."""
    import langchain_sandbox as package
    from langchain_sandbox.deepagents import SandboxBackend

    classes = [
        getattr(package, name)
        for name in (
            "SandboxExecTool",
            "SandboxShellTool",
            "SandboxReadFileTool",
            "SandboxWriteFileTool",
            "SandboxListFilesTool",
            "SandboxInstallPackagesTool",
            "SandboxToolkit",
            "SandboxMiddleware",
            "SandboxToolNode",
            "SandboxRuntime",
        )
    ]
    pages = {p: p.read_text() for p in (site / "reference").rglob("index.html")}
    missing = {}
    for cls in [*classes, SandboxBackend]:
        anchor = f"langchain_sandbox.{cls.__name__}"
        page = next(text for text in pages.values() if f'id="{anchor}"' in text)
        text = _section(page, anchor)
        absent = [p for p in _constructor_parameters(cls) if not re.search(rf"\b{p}\b", text)]
        if absent:
            missing[cls.__name__] = absent
    assert missing == {}
    exec_tool = _section(
        next(t for t in pages.values() if 'id="langchain_sandbox.SandboxExecTool"' in t),
        "langchain_sandbox.SandboxExecTool",
    )
    from langchain_sandbox.results import DEFAULT_RENDER_CHARS

    # Inherited from SandboxTool, with its type, default and description.
    row = re.search(r"max_output_chars\s+int\s+(\S+)\s+Characters", exec_tool)
    assert row is not None, exec_tool[:2000]
    assert row.group(1) == str(DEFAULT_RENDER_CHARS)


def test_the_reference_has_no_raw_sphinx_roles(site: Path) -> None:
    """Docstrings cross-reference with mkdocstrings' ``[name][path]``; a Sphinx role
    (``:class:`X```) is not resolved by it and would render as its raw text."""
    raw = {
        str(page.relative_to(site)): sorted(set(found))
        for page in (site / "reference").rglob("index.html")
        if (found := re.findall(r":(?:class|meth|func|mod|data|attr|exc|obj):", page.read_text()))
    }
    assert raw == {}


def test_the_home_page_starts_a_reader_off(site: Path) -> None:
    """The home page shows the package at work and where to go next, not a table of file names."""
    home = (site / "index.html").read_text()
    assert "SandboxExecTool()" in home
    assert 'href="getting-started/"' in home
    assert not re.search(r">\w[\w/-]*\.md<", home), "a file name shown as a link text"


def test_links_in_the_rendered_notebooks_resolve(site: Path) -> None:
    """The notebooks link to the docs by repository paths (``../docs/deepagents.md``); on the
    site each must reach a page (mkdocs --strict does not check notebook pages itself)."""
    broken = []
    for page in (site / "cookbook").rglob("index.html"):
        for href in re.findall(r'href="([^"#?]+)[^"]*"', page.read_text()):
            if re.match(r"^[a-z]+:", href) or href.startswith("//"):
                continue
            target = (page.parent / href).resolve()
            if not (target.is_file() or (target / "index.html").is_file()):
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert broken == []
    deep_agents = (site / "cookbook" / "deep_agents" / "index.html").read_text()
    assert 'href="../../deepagents/"' in deep_agents
