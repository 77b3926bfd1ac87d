"""The docs stay true: their commands run, their examples answer as shown, no stale figures.

- README and docs/*.md quote no line counts or test counts (they went stale
  before; `bash tools/test.sh --co -q` counts the tests when needed);
- every `python tools/NAME.py ...` (or `python tools/PACKAGE ...`) command quoted there names a real script,
  and each of its options is one the script's `--help` lists; likewise the
  options quoted for `walqueue-fsck` and `walqueue`;
- the consumer guide's command-line session and the CLI README's example are run
  against the consumer and must answer exactly what they show;
- the README keeps exactly two commands for a newcomer, and the demo runs
  from the source tree without any install, saying what it does first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RunPython

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = [REPO_ROOT / "README.md", *sorted(p for p in (REPO_ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
PACKAGE_READMES = sorted((REPO_ROOT / "packages").glob("*/README.md"))


def blocks(path: Path, language: str | None = None) -> list[str]:
    """The fenced code blocks of a Markdown file (of one language, or all)."""
    found: list[str] = []
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current = [] if language is None or line.strip() == f"```{language}" else None
                if current is None:
                    current = ["\0skip"]
            else:
                if current[:1] != ["\0skip"]:
                    found.append("\n".join(current))
                current = None
            continue
        if current is not None:
            current.append(line)
    return found


# -- no stale figures ---------------------------------------------------------------------------

STALE = re.compile(r"\b\d[\d,]*\s+(lines of (library )?code|lines of tests|test cases)\b|\b\d[\d,]*-line\b")


@pytest.mark.parametrize("path", DOCS + PACKAGE_READMES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_line_or_test_counts_that_go_stale(path: Path) -> None:
    assert STALE.findall(path.read_text(encoding="utf-8")) == []


# -- the commands the docs quote ------------------------------------------------------------------

TOOL_COMMAND = re.compile(r"python[\d.]*[ \t]+(tools/[\w-]+(?:\.py)?)((?:[ \t]+[^\s`#|]+)*)")


def quoted_tool_commands() -> list[tuple[str, str, list[str]]]:
    commands: list[tuple[str, str, list[str]]] = []
    for path in DOCS + PACKAGE_READMES:
        for match in TOOL_COMMAND.finditer(path.read_text(encoding="utf-8")):
            words = match.group(2).split()
            options = [word.split("=")[0] for word in words if re.fullmatch(r"--[a-zA-Z][\w-]*(=\S*)?", word)]
            commands.append((str(path.relative_to(REPO_ROOT)), match.group(1), options))
    return commands


def test_the_docs_quote_tool_commands() -> None:
    scripts = {script for _, script, _ in quoted_tool_commands()}
    assert {"tools/release.py", "tools/torture", "tools/bench"} <= scripts


@pytest.mark.parametrize("script", sorted({s for _, s, _ in quoted_tool_commands()}))
def test_every_quoted_tool_runs_and_knows_the_quoted_options(script: str, run_python: RunPython) -> None:
    assert (REPO_ROOT / script).is_file() or (REPO_ROOT / script / "__main__.py").is_file(), script
    result = run_python([str(REPO_ROOT / script), "--help"], timeout=120)
    assert result.returncode == 0, result.stderr
    helps = result.stdout
    for subcommand in ("build", "bump", "check"):
        if script == "tools/release.py":
            sub = run_python([str(REPO_ROOT / script), subcommand, "--help"])
            assert sub.returncode == 0, sub.stderr
            helps += sub.stdout
    for doc, quoted, options in quoted_tool_commands():
        if quoted == script:
            for option in options:
                assert option in helps, f"{doc}: {script} {option}"


@pytest.mark.parametrize(
    ("command", "module"), [("walqueue-fsck", "walqueue.format.fsck"), ("walqueue", "walqueue.cli")]
)
def test_options_quoted_for_the_commands_exist(command: str, module: str, run_python: RunPython) -> None:
    pattern = re.compile(rf"(?<![\w-]){re.escape(command)}((?:\s+--[\w-]+)+)")
    quoted = {
        opt for path in DOCS + PACKAGE_READMES for m in pattern.finditer(path.read_text()) for opt in m.group(1).split()
    }
    assert quoted, command
    result = run_python(["-m", module, "--help"])
    assert result.returncode == 0
    for option in quoted:
        assert option in result.stdout, f"{command} {option}"


# -- examples that must answer as shown -------------------------------------------------------------


def consumer(directory: Path, requests: str, src_pythonpath: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": src_pythonpath}
    result = subprocess.run(
        [sys.executable, "-m", "walqueue.cli", str(directory)],
        input=requests, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_consumer_guide_session_answers_exactly_as_shown(tmp_path: Path, src_pythonpath: str) -> None:
    (session,) = [b for b in blocks(REPO_ROOT / "docs" / "guide" / "consumer.md") if b.startswith("> {")]
    requests = [line[2:] for line in session.splitlines() if line.startswith("> ")]
    answers = [line[2:] for line in session.splitlines() if line.startswith("< ")]
    assert len(requests) == len(answers) >= 10
    assert consumer(tmp_path / "q", "\n".join(requests) + "\n", src_pythonpath) == answers


def test_the_cli_readme_example_answers_exactly_as_shown(tmp_path: Path, src_pythonpath: str) -> None:
    readme = REPO_ROOT / "packages" / "walqueue-cli" / "README.md"
    (command,) = [b for b in blocks(readme, "sh") if "| walqueue /tmp/q" in b]
    requests = re.findall(r"'(\{.*?\})'", command)
    (shown,) = [b for b in blocks(readme, "") if b.startswith('{"ok"')]
    assert consumer(tmp_path / "q", "\n".join(requests) + "\n", src_pythonpath) == shown.splitlines()


def test_the_engine_readme_example_runs(tmp_path: Path, run_python: RunPython) -> None:
    (code,) = blocks(REPO_ROOT / "packages" / "walqueue-engine" / "README.md", "python")
    path = repr(str(tmp_path / "q"))
    code = code.replace('"/var/lib/myapp/queue"', path)
    result = run_python(["-c", code + f"\nwith Queue({path}) as q:\n    print(q.get('email-42').status)"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "completed"


def test_no_readme_promises_an_install_from_the_package_index() -> None:
    for path in [REPO_ROOT / "README.md", *PACKAGE_READMES]:
        for line in "\n".join(blocks(path, "sh")).splitlines():
            if re.search(r"pip install\s+walqueue-(format|engine|cli)\b", line):
                pytest.fail(f"{path.relative_to(REPO_ROOT)}: {line.strip()} (these versions are on no index)")
            if re.search(r"pip install .*--find-links", line):
                assert "--no-index" in line, line


# -- the two commands ---------------------------------------------------------------------------------


def test_the_readme_keeps_exactly_two_commands_for_a_newcomer() -> None:
    quick_start = (REPO_ROOT / "README.md").read_text(encoding="utf-8").split("## Quick start", 1)[1]
    first_block = blocks_from_text(quick_start)[0]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["bash tools/demo.sh", "bash tools/test.sh"]


def blocks_from_text(text: str) -> list[str]:
    parts = text.split("```")
    return [part.split("\n", 1)[1] for part in parts[1::2]]


def test_the_demo_runs_from_the_source_tree_without_any_install(tmp_path: Path) -> None:
    demo = (REPO_ROOT / "tools" / "demo.sh").read_text(encoding="utf-8")
    assert "_venv.sh" not in demo and "WALQUEUE_VENV" not in demo and "pip install" not in demo
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = sys.executable
    env["TMPDIR"] = str(tmp_path)
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "tools" / "demo.sh")],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("demo: looking for a Python >= 3.12")
    assert "nothing is installed" in result.stdout.splitlines()[1]
    assert "result: healthy (exit 0)" in result.stdout and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # its temporary directory is gone
