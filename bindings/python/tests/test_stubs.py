"""The type stubs (tagwire/__init__.pyi) describe what the module has: every
class and method the stubs name exists at run time, and every public method
of the native classes is in the stubs."""

from __future__ import annotations

import ast
from pathlib import Path

import tagwire

STUBS = Path(tagwire.__file__).with_name("__init__.pyi")
NATIVE = [
    "Session",
    "SessionBuilder",
    "EmbeddedRouter",
    "Publisher",
    "EventBuilder",
    "Subscriber",
    "CallbackSubscription",
    "Sample",
    "Pull",
]


def stub_classes() -> dict[str, set[str]]:
    tree = ast.parse(STUBS.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.name
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return out


def test_stubs_ship_with_the_package():
    assert STUBS.is_file()
    assert STUBS.with_name("py.typed").is_file()


def test_every_stubbed_member_exists_at_run_time():
    missing = []
    for cls, members in stub_classes().items():
        if cls not in NATIVE:
            continue  # TypedDicts and aliases exist only for type checkers
        runtime = getattr(tagwire, cls)
        for m in members:
            if m in ("__buffer__", "__init__"):
                continue  # the buffer protocol is C-level; __init__ is SessionBuilder()
            if not hasattr(runtime, m):
                missing.append(f"{cls}.{m}")
    assert missing == []


def test_every_public_native_member_is_stubbed():
    stubs = stub_classes()
    unstubbed = []
    for cls in NATIVE:
        assert cls in stubs, f"class {cls} is not in the stubs"
        for m in dir(getattr(tagwire, cls)):
            if m.startswith("_"):
                continue
            if m not in stubs[cls]:
                unstubbed.append(f"{cls}.{m}")
    assert unstubbed == []


def test_every_exported_name_is_in_the_stubs():
    text = STUBS.read_text()
    assert [n for n in tagwire.__all__ if n not in text] == []
