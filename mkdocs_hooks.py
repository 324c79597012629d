"""Build-time parts of the documentation site (MkDocs hooks, named in ``mkdocs.yml``).

* **The API reference follows the code.** Its pages are generated from the public names (the
  ``__all__`` of ``langchain_sandbox``, ``langchain_sandbox.testing`` and the emulator modules),
  one page per layer of the package, each name rendered by mkdocstrings from its docstring under
  the name users import. A name exported, moved or renamed in the code appears in the reference
  with no edit to the docs, and the methods a class takes from private mixins appear on its own
  entry.
* **Pydantic constructors are documented.** The tools and the toolkit are pydantic models, whose
  generated ``__init__`` names no parameter; each gets a table of the fields this package
  declares (inherited ones included: a tool's ``provider``... live on ``SandboxTool``), with the
  type, the default and the description from the ``Args:`` of the class that declares it.
* **Links in the notebooks resolve.** The notebooks link to the docs by their paths in the
  repository (``../docs/deepagents.md``, which works where the notebook is read on GitHub);
  mkdocs-jupyter leaves those links as they are and ``--strict`` does not check them, so each is
  rewritten to the page's URL on the site, and a link to nothing is a build warning (an error
  under ``--strict``).
* **No page is lost.** A page under ``docs/`` that the nav does not list is added to the nav:
  under its section if :data:`_SECTION_OF` names one (pages written while the nav was not looking),
  otherwise under "More".
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import posixpath
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.langchain_sandbox")
_ROOT = Path(__file__).resolve().parent
_HREF = re.compile(r'href="([^"#?:]+)((?:#[^"]*)?)"')

# Public modules whose ``__all__`` the reference documents, in page order within a layer.
_PUBLIC_MODULES = (
    "langchain_sandbox",
    "langchain_sandbox.testing",
    "langchain_sandbox.testing.e2b_emulator",
    "langchain_sandbox.testing.runloop_emulator",
    "langchain_sandbox.testing.kubernetes_emulator",
)
# Layer (the first package segment of where a name is defined) -> page title, in nav order.
_LAYERS = {
    "tools": "Tools",
    "graph": "Graph",
    "state": "Graph",
    "runtime": "Runtime",
    "deepagents": "Deep Agents",
    "providers": "Providers",
    "snapshots": "Snapshots",
    "results": "Results",
    "errors": "Errors",
    "testing": "Testing",
}
_OTHER = "Other"
_REFERENCE = "API reference"
# Pages that belong to a section of the nav, wherever they come from: page -> (section, title).
_SECTION_OF = {"deepagents.md": ("Concepts", "Deep Agents")}


def _reference_pages() -> dict[str, list[str]]:
    """Page title -> the public dotted names it documents."""
    pages: dict[str, list[str]] = defaultdict(list)
    for module_name in _PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            defined_in = getattr(getattr(module, name), "__module__", "") or ""
            layer = defined_in.split(".")[1] if defined_in.startswith("langchain_sandbox.") else ""
            pages[_LAYERS.get(layer, _OTHER)].append(f"{module_name}.{name}")
    order = [*dict.fromkeys(_LAYERS.values()), _OTHER]
    return {title: pages[title] for title in order if pages.get(title)}


_ARG = re.compile(r"^(\s+)(\w+):\s*(.*)$")


def _documented_args(cls: type) -> dict[str, str]:
    """``name -> description`` from the Google-style ``Args:`` of ``cls`` and its bases."""
    described: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        lines = inspect.cleandoc(base.__doc__ or "").splitlines()
        if "Args:" not in lines:
            continue
        current, indent = "", None
        for line in lines[lines.index("Args:") + 1 :]:
            if line and not line.startswith(" "):
                break
            match = _ARG.match(line)
            if match and (indent is None or len(match.group(1)) == indent):
                indent, current = len(match.group(1)), match.group(2)
                described[current] = match.group(3)
            elif current and line.strip():
                described[current] += " " + line.strip()
    return described


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(?:[\w]+\.)+(\w+)", r"\1", str(annotation))


def _directive(dotted: str) -> str:
    """The mkdocstrings directive for one public name. A class that takes operations from mixins
    in private modules (`SandboxRuntime`'s ``_runtime_operations``...) renders them as its own
    members: the mixins are how the code is split, not something a user imports."""
    module_name, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(module_name), name)
    mixins = [
        base
        for base in getattr(obj, "__mro__", ())[1:]
        if base.__module__.startswith("langchain_sandbox.")
        and base.__module__.rpartition(".")[2].startswith("_")
    ]
    if not (isinstance(obj, type) and mixins):
        return f"::: {dotted}\n"
    return f"::: {dotted}\n    options:\n      inherited_members: true\n"


def _fields_table(dotted: str) -> str:
    """A parameters table for a pydantic model of this package ('' for anything else)."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    module_name, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        return ""
    ours = [b for b in cls.__mro__ if b.__module__.startswith("langchain_sandbox")]
    described = _documented_args(cls)
    rows = ["**Parameters** (keyword arguments):\n", "| Name | Type | Default | Description |"]
    rows.append("| --- | --- | --- | --- |")
    for field_name, field in cls.model_fields.items():
        if not any(field_name in vars(b).get("__annotations__", {}) for b in ours):
            continue
        if field.default_factory is not None:
            default = f"`{getattr(field.default_factory, '__name__', 'factory')}()`"
        elif field.default is PydanticUndefined:
            default = "required"
        elif isinstance(field.default, type):
            default = f"`{field.default.__name__}`"
        else:
            default = f"`{field.default!r}`" if len(repr(field.default)) < 60 else "(see source)"
        about = described.get(field_name, "LangChain's `BaseTool` field, set by this tool.")
        # A pipe inside a code span would end the table cell: the type is written as text.
        kind = _type_name(field.annotation).replace("|", "\\|")
        about = about.replace("|", "\\|")
        rows.append(f"| `{field_name}` | {kind} | {default} | {about} |")
    return "\n".join(rows) + "\n"


def _slug(title: str) -> str:
    return title.lower().replace(" ", "-")


def _listed(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_listed(value) for value in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_listed(item) for item in nav))
    return set()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    pages = _reference_pages()
    reference = [{"Overview": "reference/index.md"}]
    reference += [{title: f"reference/{_slug(title)}.md"} for title in pages]
    nav: list[Any] = config.nav or []
    config.nav = [
        {_REFERENCE: reference} if item == {_REFERENCE: "reference/index.md"} else item
        for item in nav
    ]
    docs = Path(config.docs_dir)
    listed = _listed(config.nav)
    unlisted = sorted(
        str(path.relative_to(docs))
        for path in docs.rglob("*.md")
        if str(path.relative_to(docs)) not in listed
    )
    more = []
    for page in unlisted:
        section, title = _SECTION_OF.get(page, ("More", ""))
        entry: Any = {title: page} if title else page
        home = next(
            (item for item in config.nav if isinstance(item, dict) and section in item), None
        )
        if home is None or section == "More":
            more.append(entry)
        else:
            home[section].append(entry)
    if more:
        config.nav.append({"More": more})
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    pages = _reference_pages()
    index = [
        "# API reference\n",
        "Every public name of the package, under the name to import it by. The pages are",
        "generated from the code's `__all__` and docstrings at each build.\n",
        "| name | page |",
        "| --- | --- |",
    ]
    for title, names in pages.items():
        slug = _slug(title)
        body = [f"# {title}\n"]
        for name in names:
            body += [_directive(name), _fields_table(name)]
        files.append(File.generated(config, f"reference/{slug}.md", content="\n".join(body)))
        index += [f"| [`{name}`]({slug}.md#{name}) | {title} |" for name in names]
    files.append(File.generated(config, "reference/index.md", content="\n".join(index) + "\n"))
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Rewrite a notebook's repository links to site URLs; warn about links to nothing."""
    if not page.file.src_uri.endswith(".ipynb") or page.file.abs_src_path is None:
        return html
    source = Path(os.path.realpath(page.file.abs_src_path)).relative_to(_ROOT)
    docs = Path(config.docs_dir).resolve().relative_to(_ROOT).as_posix()

    def rewrite(match: re.Match[str]) -> str:
        href, fragment = match.group(1), match.group(2)
        if href.startswith("/"):
            return match.group(0)
        in_repo = posixpath.normpath(posixpath.join(source.parent.as_posix(), href))
        target = None
        if in_repo.startswith(f"{docs}/"):
            target = files.get_file_from_path(in_repo[len(docs) + 1 :])
        if target is None:
            target = files.get_file_from_path(
                posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), href))
            )
        if target is None:
            log.warning("%s links to %r, which is no page or file of the site", source, href)
            return match.group(0)
        return f'href="{target.url_relative_to(page.file)}{fragment}"'

    return _HREF.sub(rewrite, html)
