"""The noxfile's sessions and the sessions a command line names, for the tests that hold docs and workflows to
the noxfile (test_docs.py, test_workflow.py)."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

SESSION_FLAGS = ("-s", "--session", "--sessions", "-e")


def nox_sessions(noxfile: Path) -> set[str]:
    """Session names of a noxfile: functions decorated with @nox.session, named by `name=` or the function."""
    names = set()
    for node in ast.walk(ast.parse(noxfile.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            target = call.func if call else deco
            if ast.unparse(target) not in ("nox.session", "session"):
                continue
            named = [k.value.value for k in (call.keywords if call else []) if k.arg == "name" and isinstance(k.value, ast.Constant)]
            names.add(named[0] if named else node.name)
    return names


def sessions_named(words: list[str]) -> list[str]:
    """Sessions named by nox's arguments `words` (`-s A B`, `--session A`, `--session=A,B`)."""
    found: list[str] = []
    for i, word in enumerate(words):
        if word in SESSION_FLAGS:
            for name in words[i + 1:]:
                if name.startswith("-"):
                    break
                found.append(name)
        elif word.startswith("--session=") or word.startswith("--sessions="):
            found += word.split("=", 1)[1].split(",")
    return found


def sessions_called(command: str) -> list[str]:
    """Sessions named by each `nox -s A [B]` / `--session A` / `--sessions A` in a shell line ([] if none)."""
    found: list[str] = []
    for part in re.split(r"&&|\|\||;|\n", command):
        words = shlex.split(part)
        if any(w == "nox" or w.endswith("/nox") for w in words):
            found += sessions_named(words)
    return found
