"""The commands, files and figures the docs quote are still real.

Docs go stale quietly: a tool becomes a package, a test file is renamed, an
option disappears, a figure is pasted once and never measured again. This
file reads README.md, docs/*.md and the package READMEs and checks:

- every path they cite under tests/, tools/, examples/, docs/ or packages/
  exists;
- every command they quote (in code blocks and inline code) names a program
  that runs, and every option quoted with it is in that program's `--help`;
  the cheap ones are run for real (`--version`, `python -m walqueue`,
  `tools/bench --list`);
- every table marked as generated is exactly what its command prints today
  (the benchmark's figures come from a JSON run committed beside the doc,
  which names its date, commit and Python);
- the operating guide's logging table names every message the engine logs.

Durations the docs quote ("7 to 9 minutes") cannot be checked here; they
are stated with the machine they were measured on (the suite: 7 to 9
minutes on a two-core CI machine, as measured on 4 December 2026).
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RunPython

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = [REPO_ROOT / "README.md", *sorted(p for p in (REPO_ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
DOCS += sorted((REPO_ROOT / "packages").glob("*/README.md"))


def _ids(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


# -- quoted paths ---------------------------------------------------------------------------------

PATH = re.compile(r"(?<![\w/.-])((?:tests|tools|examples|docs|packages)/[\w./-]*[\w/])")


@pytest.mark.parametrize("doc", DOCS, ids=_ids)
def test_every_quoted_path_exists(doc: Path) -> None:
    cited = {match.group(1) for match in PATH.finditer(doc.read_text(encoding="utf-8"))}
    missing = sorted(path for path in cited if not (REPO_ROOT / path.rstrip("/.")).exists())
    assert missing == [], f"{_ids(doc)} cites paths that do not exist: {missing}"


# -- quoted commands ------------------------------------------------------------------------------

#: How each quoted program is started here (with the checkout's src directories on PYTHONPATH).
PROGRAMS: dict[str, list[str]] = {
    "walqueue-fsck": ["-m", "walqueue.format.fsck"],
    "walqueue-serve": ["-m", "walqueue.serve"],
    "walqueue-worker": ["-m", "walqueue.worker"],
    "python -m walqueue.worker": ["-m", "walqueue.worker"],
    "walqueue": ["-m", "walqueue.cli"],
    "python -m walqueue.format.fsck": ["-m", "walqueue.format.fsck"],
    "python -m walqueue.cli.serve": ["-m", "walqueue.cli.serve"],
    "python -m walqueue.serve": ["-m", "walqueue.serve"],
    "python -m walqueue.cli": ["-m", "walqueue.cli"],
    "python -m walqueue": ["-m", "walqueue"],
    # `walqueue --socket PATH VERB ...` is the shell: its verbs and their options are in its own --help.
    "walqueue --socket": ["-m", "walqueue.cli", "--socket", "/nonexistent.sock"],
}
COMMAND = re.compile(
    r"(?:^|\$ |`)(?P<program>walqueue-fsck|walqueue-serve|walqueue-worker|walqueue(?![\w.-])"
    r"|python[\d.]* -m walqueue[\w.]*"
    r"|python[\d.]* tools/[\w-]+(?:\.py)?)(?P<rest>[^`\n|#]*)",
    re.MULTILINE,
)


def _code(text: str) -> list[str]:
    """The text of every fenced block and every inline code span."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return fenced + re.findall(r"`([^`\n]+)`", prose)


def _normalize(program: str) -> str:
    return re.sub(r"^python[\d.]*", "python", program)


@cache
def quoted_commands() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(doc, program, subcommand or "", options) for every command line the docs quote."""
    commands = []
    for doc in DOCS:
        for code in _code(doc.read_text(encoding="utf-8")):
            for match in COMMAND.finditer(code):
                program = _normalize(match.group("program"))
                try:
                    words = shlex.split(match.group("rest"), comments=True)
                except ValueError:
                    words = match.group("rest").split()
                option = re.compile(r"--?[a-zA-Z][\w-]*(=.*)?")
                options = tuple(word.split("=")[0] for word in words if option.fullmatch(word))
                positional = [word for word in words if not option.fullmatch(word)]
                if program == "walqueue" and "--socket" in words:  # the shell; the socket path is no verb
                    program = "walqueue --socket"
                    positional = positional[1:]
                subcommand = positional[0] if positional and re.fullmatch(r"[a-z]+", positional[0]) else ""
                commands.append((_ids(doc), program, subcommand, options))
    return commands


def _argv(program: str) -> list[str]:
    if program in PROGRAMS:
        return PROGRAMS[program]
    script = program.removeprefix("python ")
    return [str(REPO_ROOT / script)]


def test_the_docs_quote_every_command() -> None:
    programs = {program for _, program, _, _ in quoted_commands()}
    assert {"walqueue", "walqueue-fsck", "walqueue-serve", "python tools/torture", "python tools/bench"} <= programs


@pytest.mark.parametrize("program", sorted({p for _, p, _, _ in quoted_commands()}))
def test_every_quoted_command_runs_and_knows_its_quoted_options(program: str, run_python: RunPython) -> None:
    result = run_python([*_argv(program), "--help"], timeout=120)
    assert result.returncode == 0, f"{program} --help: {result.stderr}"
    choices = {word for group in re.findall(r"\{([\w,-]+)\}", result.stdout) for word in group.split(",")}
    # the shell lists its verbs under VERB, one an indented line: "    dead             list the ..."
    if "\n  VERB\n" in result.stdout:
        verbs = result.stdout.split("\n  VERB\n", 1)[1].split("\n\n", 1)[0]
        choices |= set(re.findall(r"^    ([a-z]+) {2,}", verbs, flags=re.MULTILINE))
    helps = {"": result.stdout}
    for doc, quoted, subcommand, options in quoted_commands():
        if quoted != program:
            continue
        if subcommand not in choices:
            subcommand = ""  # a positional argument (a directory), not a subcommand
        if subcommand not in helps:
            sub = run_python([*_argv(program), subcommand, "--help"], timeout=120)
            assert sub.returncode == 0, f"{program} {subcommand} --help: {sub.stderr}"
            helps[subcommand] = sub.stdout
        for option in options:
            if option in ("-h", "--help"):
                continue
            text = helps[subcommand] + helps[""]  # an option before the subcommand is the program's own
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), f"{doc}: {program} {option}"


@pytest.mark.parametrize("program", ["walqueue", "walqueue-fsck", "walqueue-serve"])
def test_the_commands_say_their_version(program: str, run_python: RunPython) -> None:
    from walqueue import __version__

    result = run_python([*PROGRAMS[program], "--version"])
    assert result.returncode == 0 and __version__ in result.stdout, result.stdout + result.stderr


def test_python_m_walqueue_runs_and_opens_nothing(run_python: RunPython, tmp_path: Path) -> None:
    result = run_python(["-m", "walqueue"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_bench_lists_the_workloads_the_docs_name(run_python: RunPython) -> None:
    result = run_python([str(REPO_ROOT / "tools" / "bench"), "--list"], timeout=120)
    assert result.returncode == 0, result.stderr
    performance = (REPO_ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    for line in result.stdout.splitlines():
        name, letter = line.split()[:2]
        assert f"| {letter.strip('()')} | `{name}` |" in performance, name


# -- generated tables -------------------------------------------------------------------------------

GENERATED = re.compile(r"<!-- generated: (?P<command>[^\n]*?) -->\n(?P<body>.*?)<!-- end generated -->", re.DOTALL)


def generated_blocks() -> list[tuple[str, str, str]]:
    return [
        (_ids(doc), match.group("command"), match.group("body"))
        for doc in DOCS
        for match in GENERATED.finditer(doc.read_text(encoding="utf-8"))
    ]


def test_the_performance_page_has_generated_figures() -> None:
    assert any(doc == "docs/PERFORMANCE.md" for doc, _, _ in generated_blocks())


@pytest.mark.parametrize(("doc", "command", "body"), generated_blocks(), ids=lambda value: str(value)[:60])
def test_every_generated_block_is_what_its_command_prints(
    doc: str, command: str, body: str, run_python: RunPython
) -> None:
    words = shlex.split(command)
    assert words[0] == "python" and words[1].startswith("tools/"), command
    result = run_python([str(REPO_ROOT / words[1]), *words[2:]], cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert body.strip() == result.stdout.strip(), f"{doc}: regenerate with `{command}`"


def test_generated_figures_name_their_date_commit_and_python() -> None:
    for doc, command, body in generated_blocks():
        if "tools/bench" in command:
            runs = len(re.findall(r"\.json\b", command))
            assert len(re.findall(r"\b\d{4}-\d{2}-\d{2}\b", body)) >= runs, (doc, command)
            assert len(re.findall(r"\bcommit [0-9a-f]{7}|, [0-9a-f]{7}(\+dirty)?, ", body)) >= runs, (doc, command)
            assert len(re.findall(r"Python 3\.\d+", body)) >= runs, (doc, command)


# -- the logging table --------------------------------------------------------------------------------

LOG_CALL = re.compile(r"\blog(?:ger)?\.(?:warning|error|info)\(\s*(f?)\"([^\"]+)\"")


def test_the_logging_table_names_every_message_the_library_logs() -> None:
    guide = (REPO_ROOT / "docs" / "guide" / "operating.md").read_text(encoding="utf-8")
    section = guide.split("## Logging", 1)[1].split("\n## ", 1)[0]
    engine = REPO_ROOT / "packages" / "walqueue-engine" / "src"
    missing = []
    for path in sorted(engine.rglob("*.py")):
        for match in LOG_CALL.finditer(path.read_text(encoding="utf-8")):
            template = match.group(2)
            if template == "%s":  # progress lines, whose text is built elsewhere (a row of their own)
                continue
            # The words before the first placeholder must appear as the table shows the message.
            lead = re.split(r"%[sdr]|\{", template, maxsplit=1)[0].strip()
            if lead and lead not in section:
                missing.append(f"{path.relative_to(REPO_ROOT)}: {template}")
    assert missing == []
