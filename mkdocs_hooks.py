"""Build-time parts of the documentation site (MkDocs hooks, named in ``mkdocs.yml``).

* **The API reference follows the code.** Its pages are generated from the public names (the
  ``__all__`` of ``langchain_sandbox``, ``langchain_sandbox.testing`` and the emulator modules),
  one page per layer of the package, each name rendered by mkdocstrings from its docstring under
  the name users import. A name exported, moved or renamed in the code appears in the reference
  with no edit to the docs.
* **No page is lost.** A page under ``docs/`` that the nav does not list is added to the nav:
  under its section if :data:`_SECTION_OF` names one (pages written while the nav was not looking),
  otherwise under "More".
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

# Public modules whose ``__all__`` the reference documents, in page order within a layer.
_PUBLIC_MODULES = (
    "langchain_sandbox",
    "langchain_sandbox.testing",
    "langchain_sandbox.testing.e2b_emulator",
    "langchain_sandbox.testing.runloop_emulator",
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
        body = [f"# {title}\n"] + [f"::: {name}\n" for name in names]
        files.append(File.generated(config, f"reference/{slug}.md", content="\n".join(body)))
        index += [f"| [`{name}`]({slug}.md#{name}) | {title} |" for name in names]
    files.append(File.generated(config, "reference/index.md", content="\n".join(index) + "\n"))
    return files
