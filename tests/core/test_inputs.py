"""Path and package-name validation: what a model may and may not ask for."""

from __future__ import annotations

import pytest

from langchain_sandbox.core.requirements import validate_requirements
from langchain_sandbox.core.workspace import relative_path, resolve_path
from langchain_sandbox.errors import InvalidPackageNameError, InvalidPathError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a.txt", "/home/user/a.txt"),
        ("./data/b.csv", "/home/user/data/b.csv"),
        ("/home/user/x/y", "/home/user/x/y"),
        ("/home/user", "/home/user"),
        ("dir//file", "/home/user/dir/file"),
    ],
)
def test_paths_resolve_inside_the_workspace(given: str, expected: str) -> None:
    assert resolve_path(given) == expected


@pytest.mark.parametrize(
    "hostile",
    [
        "../etc/passwd",
        "/etc/passwd",
        "a/../../b",
        "/home/username",
        "",
        "a\x00b",
        "a\\b",
        "/home/user/..",
    ],
)
def test_escaping_paths_are_refused(hostile: str) -> None:
    with pytest.raises(InvalidPathError):
        resolve_path(hostile)


def test_relative_path() -> None:
    assert relative_path("/home/user/a/b") == "a/b"
    assert relative_path("/home/user") == "."


@pytest.mark.parametrize(
    "name",
    ["numpy", "pandas==2.2.3", "requests[socks]>=2,<3", "scikit-learn", "zope.interface~=6.0"],
)
def test_plain_requirements_are_accepted(name: str) -> None:
    assert validate_requirements([f"  {name} "]) == [name]


@pytest.mark.parametrize(
    "hostile",
    [
        "--index-url",
        "-e .",
        "numpy; rm -rf /",
        "$(id)",
        "`id`",
        "https://example.invalid/pkg.whl",
        "./local/path",
        "/tmp/x.whl",
        "pkg @ https://example.invalid/x.whl",
        "numpy\nrequests",
        "",
    ],
)
def test_hostile_requirements_are_refused(hostile: str) -> None:
    with pytest.raises(InvalidPackageNameError):
        validate_requirements([hostile])


def test_requirements_list_must_be_non_empty_and_bounded() -> None:
    with pytest.raises(InvalidPackageNameError):
        validate_requirements([])
    with pytest.raises(InvalidPackageNameError):
        validate_requirements([f"pkg{i}" for i in range(100)])
