"""The documentation against the code: README size and commands, the generated CLI reference, the project
structure page, and every shell command in README.md, docs/ and benchmarks/README.md.

Fast and cluster-free: parsers are built, nothing is run but `benchmarks/X.py --help`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import importlib.util
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from suites.unit.nox_sessions import nox_sessions, sessions_named

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_LIMIT = 12_288
MAIN_COMMAND = "python3 -m pip install --quiet nox && python3 -m nox -s e2e"
TEST_COMMAND = "python3 -m pip install --quiet nox && python3 -m nox -s tests"
DUMMY = "placeholder"

# Programs a doc may run that this test does not check further; a new one must be added here on purpose.
ALLOWED_PROGRAMS = {
    "pip", "pip3", "kubectl", "export", "cd", "git", "eval", ".", "source",
    "fake-nvidia-smi",  # our console script (pyproject [project.scripts])
}
_FENCE = re.compile(r"^\s*```(\w*)\s*$")
_SHELL_FENCES = {"sh", "bash", "console", "shell"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBST = re.compile(r"\$\(([^()]*)\)")
_VAR = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
_SEPARATORS = {"&&", "||", "|", ";", "&"}
_REDIRECTS = {">", ">>", "<", "2>", "&>"}


# ---------------------------------------------------------------------------------------------- extraction


def shell_lines(markdown: str) -> list[str]:
    """The command lines inside ```sh / ```bash / ```console fences, continuation lines joined."""
    lines, inside, pending = [], False, ""
    for raw in markdown.splitlines():
        fence = _FENCE.match(raw)
        if fence:
            inside = not inside and fence.group(1) in _SHELL_FENCES if not inside else False
            pending = ""
            continue
        if not inside:
            continue
        text = pending + raw.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        if text:
            lines.append(text)
    return lines


def commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line: `$ ` prompt, comments, env assignments and `export` stripped,
    split on && and |; what runs inside $(...) is a command of its own, replaced by a dummy word."""
    line = line.strip()
    if line.startswith("$ "):
        line = line[2:]
    if not line or line.startswith("#"):
        return []
    found: list[list[str]] = []
    while True:
        inner = _SUBST.search(line)
        if not inner:
            break
        found += commands(inner.group(1))
        line = line[:inner.start()] + DUMMY + line[inner.end():]
    line = _VAR.sub(DUMMY, line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segment: list[str] = []
    segments = [segment]
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
            continue
        if token in _SEPARATORS:
            segment = []
            segments.append(segment)
        elif token in _REDIRECTS:
            skip_next = True
        else:
            segment.append(token)
    for words in segments:
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words or words[0] == "export":
            continue
        found.append(words)
    return found


def doc_files() -> list[Path]:
    files = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def all_commands() -> list[tuple[str, list[str]]]:
    out = []
    for path in doc_files():
        for line in shell_lines(path.read_text()):
            for words in commands(line):
                out.append((f"{path.relative_to(ROOT)}: {line}", words))
    return out


# ---------------------------------------------------------------------------------------------- checks


@lru_cache(maxsize=None)
@lru_cache(maxsize=None)
def noxfile_sessions() -> frozenset[str]:
    return frozenset(nox_sessions(ROOT / "noxfile.py"))


@lru_cache(maxsize=None)
def script_help(script: str, subcommand: tuple[str, ...]) -> str:
    done = subprocess.run([sys.executable, str(ROOT / script), *subcommand, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, f"`python {script} {' '.join(subcommand)} --help` failed: {done.stderr.strip()[-300:]}"
    return done.stdout


def _check_dra_testbed(args: list[str]) -> str | None:
    from testbed.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(args)
    except SystemExit as exc:
        return f"dra-testbed does not parse it (exit {exc.code}): {err.getvalue().strip()[-300:]}"
    return None


def _check_nox(args: list[str]) -> str | None:
    names = sessions_named(args[:args.index("--")] if "--" in args else args)  # posargs after `--` go to the session
    unknown = [n for n in names if n not in noxfile_sessions()]
    return f"no nox session {unknown[0]!r} in noxfile.py" if unknown else None


def _check_pytest(args: list[str]) -> str | None:
    for word in args:
        if word == "--":
            break
        if word.startswith("suites/") or word.startswith("suites\\"):
            path = word.split("::")[0]
            if not (ROOT / path).exists():
                return f"pytest path {path} does not exist"
    return None


def _check_script(script: str, args: list[str]) -> str | None:
    if not (ROOT / script).is_file():
        return f"no script {script}"
    if not script.startswith("benchmarks/"):
        return None
    sub = tuple(a for a in args[:1] if not a.startswith("-"))
    text = script_help(script, sub)
    for word in args:
        flag = word.split("=")[0]
        if flag.startswith("--") and not re.search(re.escape(flag) + r"(?![\w-])", text):
            return f"{script} has no option {flag}"
    return None


def _check_python(args: list[str]) -> str | None:
    if not args:
        return None
    if args[0] == "-c":
        return None
    if args[0] == "-m":
        module, rest = args[1], args[2:]
        if module == "nox":
            return _check_nox(rest)
        if module == "pytest":
            return _check_pytest(rest)
        if module == "pip":
            return None
        return None if importlib.util.find_spec(module) is not None else f"no module {module}"
    return _check_script(args[0], args[1:])


def check(words: list[str]) -> str | None:
    """None when the command is right against the tree; else why not."""
    program, args = words[0], words[1:]
    if program == "dra-testbed":
        return _check_dra_testbed(args)
    if program in ("python", "python3") or re.fullmatch(r"python3\.\d+", program):
        return _check_python(args)
    if program == "nox":
        return _check_nox(args)
    if program == "pytest":
        return _check_pytest(args)
    if program in ALLOWED_PROGRAMS:
        return None
    return f"program {program!r} is neither checked nor on the allow-list of suites/unit/test_docs.py"


# ---------------------------------------------------------------------------------------------- tests


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move detail into docs/"


def test_readme_has_the_two_commands() -> None:
    text = README.read_text()
    assert MAIN_COMMAND in text
    assert TEST_COMMAND in text


def test_cli_reference_is_current() -> None:
    from testbed.cli.reference import DOC, render

    assert DOC.is_file(), "docs/reference/cli.md is missing: run `python -m testbed.cli.reference`"
    assert DOC.read_text() == render(), "docs/reference/cli.md is stale: run `python -m testbed.cli.reference`"


def test_cli_reference_sees_a_new_subcommand(monkeypatch: pytest.MonkeyPatch) -> None:
    import testbed.cli
    from testbed.cli.reference import render

    before = render()
    original = testbed.cli.build_parser

    def with_extra() -> argparse.ArgumentParser:
        parser = original()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        extra = sub.add_parser("extra-command", help="a subcommand the reference does not know yet")
        extra.add_argument("--flag", help="an option")
        return parser

    monkeypatch.setattr(testbed.cli, "build_parser", with_extra)
    after = render()
    assert after != before
    assert "dra-testbed extra-command" in after and "--flag" in after


def test_cli_reference_check_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import testbed.cli.reference as ref

    monkeypatch.setattr(ref, "DOC", tmp_path / "docs" / "reference" / "cli.md")
    assert ref.main(["--check"]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert ref.main([]) == 0
    assert ref.main(["--check"]) == 0


def _top_level_dirs() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    return {line.split("/")[0] for line in listed if "/" in line and (ROOT / line.split("/")[0]).is_dir()}


def _packages() -> set[str]:
    found = set()
    for top in ("testbed", "fake_gpus"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(init.parent.relative_to(ROOT).as_posix())
    return found


def test_project_structure_lists_the_tree() -> None:
    text = (ROOT / "docs" / "design" / "project-structure.md").read_text()
    named = set(re.findall(r"`([^`\s]+/)`", text))
    missing = sorted({f"{d}/" for d in _top_level_dirs()} - named)
    assert not missing, f"docs/design/project-structure.md does not list the top-level folders {missing}"
    missing = sorted({f"{p}/" for p in _packages()} - named)
    assert not missing, f"docs/design/project-structure.md does not list the packages {missing}"
    tops = {d.name for d in ROOT.iterdir() if d.is_dir()}
    gone = sorted(p for p in named if p.split("/")[0] in tops | {"testbed", "fake_gpus", "hostenv"} and not (ROOT / p).is_dir())
    assert not gone, f"docs/design/project-structure.md names folders that do not exist: {gone}"


def test_boards_page_has_the_catalog_s_tables() -> None:
    from fake_gpus.catalog import all_boards
    from fake_gpus.catalog.provenance import markdown_section

    text = (ROOT / "docs" / "reference" / "boards.md").read_text()
    begin = text.index("-->\n", text.index("<!-- provenance tables")) + 4
    end = text.index("\n<!-- end of provenance tables -->")
    assert text[begin:end] == markdown_section(all_boards()), \
        "docs/reference/boards.md provenance tables are stale; paste markdown_section(all_boards())"


def test_every_documented_command_is_right() -> None:
    found = all_commands()
    assert any(words[0] == "dra-testbed" for _, words in found), "no dra-testbed command found: the extractor is broken"
    failures = [f"{where}\n    {why}" for where, words in found if (why := check(words))]
    assert not failures, "documented commands that do not match the code:\n" + "\n".join(failures)


SAMPLE = """\
Text with `dra-testbed bogus` outside a fence is ignored.

```sh
$ dra-testbed up --name lab   # a comment
export KUBECONFIG=$(dra-testbed kubeconfig --name lab)
FOO=1 BAR=2 python3 -m nox -s e2e -- -k b200 | tee out.log
dra-testbed density --trace t.csv \\
    --fleet f.yaml
# only a comment
```

```yaml
kind: NotAShellCommand
```

```console
kubectl get nodes && cd /tmp
```
"""


def test_extractor_on_a_sample() -> None:
    lines = [line for line in shell_lines(SAMPLE)]
    assert lines == ["$ dra-testbed up --name lab   # a comment",
                     "export KUBECONFIG=$(dra-testbed kubeconfig --name lab)",
                     "FOO=1 BAR=2 python3 -m nox -s e2e -- -k b200 | tee out.log",
                     "dra-testbed density --trace t.csv --fleet f.yaml",
                     "# only a comment",
                     "kubectl get nodes && cd /tmp"]
    parsed = [words for line in lines for words in commands(line)]
    assert parsed == [["dra-testbed", "up", "--name", "lab"],
                      ["dra-testbed", "kubeconfig", "--name", "lab"],
                      ["python3", "-m", "nox", "-s", "e2e", "--", "-k", "b200"],
                      ["tee", "out.log"],
                      ["dra-testbed", "density", "--trace", "t.csv", "--fleet", "f.yaml"],
                      ["kubectl", "get", "nodes"],
                      ["cd", "/tmp"]]


def test_checker_on_samples() -> None:
    assert check(["dra-testbed", "up", "--name", "lab"]) is None
    assert check(["dra-testbed", "up", "--no-such-flag"]) is not None
    assert check(["dra-testbed", "no-such-command"]) is not None
    assert check(["python3", "-m", "nox", "-s", "e2e", "--", "-k", "x"]) is None
    assert check(["nox", "-s", "no-such-session"]) is not None
    assert check(["pytest", "suites/unit"]) is None
    assert check(["pytest", "suites/no-such-suite"]) is not None
    assert check(["python", "-m", "testbed.cli.reference"]) is None
    assert check(["python", "-m", "no_such_module_here"]) is not None
    assert check(["python", "benchmarks/nvml_latency.py", "--seconds", "1"]) is None
    assert check(["python", "benchmarks/nvml_latency.py", "--no-such-flag"]) is not None
    assert check(["tee", "out.log"]) is not None  # not on the allow-list
    assert check(["kubectl", "get", "nodes"]) is None
