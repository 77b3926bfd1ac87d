"""The systemd units the docs give (server and workers) are valid units whose commands take their arguments.

The parse check always runs: every ```ini block that is a unit parses, holds
only known sections, names one of our commands in ExecStart with arguments
that command's own parser accepts, and prevents restarts only on exit
statuses that command documents. `systemd-analyze verify` runs where it is
installed, on the units as written except for the venv's bin directory (an
example path) pointed at the scripts of this test environment.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = REPO_ROOT / "docs" / "guide" / "deployment.md"
#: The guide to several processes keeps the server's unit beside its options: it is checked too.
PROCESSES = REPO_ROOT / "docs" / "guide" / "processes.md"
EXAMPLE_BIN = "/opt/app/venv/bin/"
SECTIONS = {"Unit", "Service", "Install"}
#: Each command's exit statuses, as its --help documents them.
EXIT_STATUSES = {"walqueue-serve": {0, 1, 2, 3, 64}, "walqueue-worker": {0, 1, 2, 3, 64}}

Unit = dict[str, dict[str, list[str]]]


def units(path: Path) -> dict[str, str]:
    """The unit files of a document: name (from the ``/etc/systemd/system/NAME`` before the block) to text."""
    found: dict[str, str] = {}
    name: str | None = None
    text = path.read_text(encoding="utf-8")
    for match in re.finditer(r"/etc/systemd/system/([\w@.-]+\.service)|```ini\n(.*?)```", text, re.DOTALL):
        if match.group(1):
            name = match.group(1)
        elif name is not None and "[Service]" in match.group(2):
            found[name] = match.group(2)
            name = None
    return found


def parse_unit(text: str) -> Unit:
    """A unit file as sections of keys to values (a key may repeat); `AssertionError` on a malformed line."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        heading = re.fullmatch(r"\[(\w+)\]", stripped)
        if heading:
            assert heading.group(1) in SECTIONS, f"line {number}: unknown section {stripped}"
            section = unit.setdefault(heading.group(1), {})
            continue
        key, equals, value = stripped.partition("=")
        assert section is not None and equals and re.fullmatch(r"[A-Za-z]+", key), f"line {number}: {line!r}"
        section.setdefault(key, []).append(value.strip())
    return unit


def documented_units(path: Path = DEPLOYMENT) -> dict[str, Unit]:
    return {name: parse_unit(text) for name, text in units(path).items()}


def test_the_guide_gives_a_server_unit_and_a_worker_unit() -> None:
    found = documented_units()
    assert set(found) == {"app-queue.service", "app-worker.service"}
    commands = {name: shlex.split(unit["Service"]["ExecStart"][0])[0] for name, unit in found.items()}
    assert commands == {
        "app-queue.service": EXAMPLE_BIN + "walqueue-serve",
        "app-worker.service": EXAMPLE_BIN + "walqueue-worker",
    }


@pytest.mark.parametrize("document", [DEPLOYMENT, PROCESSES], ids=["deployment-guide", "processes-guide"])
def test_each_unit_runs_a_command_line_its_command_accepts(document: Path) -> None:
    from walqueue.serve.cli import _argument_parser as serve_parser
    from walqueue.worker.cli import _parser as worker_parser

    sockets = {}
    found = documented_units(document)
    assert document == PROCESSES or len(found) == 2
    for name, unit in found.items():
        service = unit["Service"]
        (exec_start,) = service["ExecStart"]
        program, *arguments = shlex.split(exec_start)
        command = program.removeprefix(EXAMPLE_BIN)
        parser = serve_parser() if command == "walqueue-serve" else worker_parser()
        parsed = parser.parse_args(arguments)  # a usage error would exit 64 here
        sockets[command] = parsed.socket
        statuses = {int(status) for status in service.get("RestartPreventExitStatus", [""])[0].split()}
        assert statuses <= EXIT_STATUSES[command] - {0}, name
        assert service["KillSignal"] == ["SIGTERM"], name
        assert "multi-user.target" in unit["Install"]["WantedBy"], name
    if document == DEPLOYMENT:
        assert sockets["walqueue-worker"] == sockets["walqueue-serve"]  # the workers reach the server's socket
        worker = found["app-worker.service"]
        assert worker["Unit"]["Requires"] == ["app-queue.service"]
        assert worker["Unit"]["After"] == ["app-queue.service"]


def test_the_worker_unit_gives_its_workers_more_than_their_grace_to_stop() -> None:
    from walqueue.worker.cli import _parser as worker_parser

    service = documented_units()["app-worker.service"]["Service"]
    parsed = worker_parser().parse_args(shlex.split(service["ExecStart"][0])[1:])
    assert float(service["TimeoutStopSec"][0]) > parsed.grace


def test_the_readme_points_at_the_deployment_guide() -> None:
    assert "docs/guide/deployment.md" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_systemd_analyze_verifies_both_units(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here: the parse checks above still ran")
    beside = Path(sys.executable).parent / "walqueue-serve"  # the test environment's own scripts, else PATH's
    script = str(beside) if beside.is_file() else shutil.which("walqueue-serve")
    if script is None:
        pytest.skip("walqueue-serve is not installed as a script here (no-install mode): nothing to point ExecStart at")
    bin_directory = str(Path(script).parent) + "/"
    paths = []
    for name, text in units(DEPLOYMENT).items():
        path = tmp_path / name
        path.write_text(text.replace(EXAMPLE_BIN, bin_directory), encoding="utf-8")
        paths.append(str(path))
    result = subprocess.run([analyze, "verify", *paths], capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0 and "Failed to " in result.stderr and "bus" in result.stderr.lower():
        pytest.skip(f"systemd-analyze cannot run here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    complaints = [line for line in result.stderr.splitlines() if any(Path(p).name in line for p in paths)]
    assert complaints == [], complaints
