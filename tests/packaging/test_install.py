"""The three distributions build, install and work together or alone (slow).

One build of the three sdists and wheels (`tools/release.py build`, which
builds each wheel from its sdist) is shared by every test here. Each install
goes into a fresh virtual environment of the interpreter running the tests,
with `--no-index`: our distributions come only from that build or from the
working tree, never from the package index. The only index access is the
build itself and one download of the build backend (hatchling) as wheels, so
that installs from a source directory can run offline too.
"""

from __future__ import annotations

import email.parser
import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("walqueue-format", "walqueue-engine", "walqueue-cli")
PY_TYPED = {
    "walqueue-format": "walqueue/format/py.typed",
    "walqueue-engine": "walqueue/py.typed",
    "walqueue-cli": "walqueue/cli/py.typed",
}
PINNED_BELOW = {"walqueue-format": None, "walqueue-engine": "walqueue-format", "walqueue-cli": "walqueue-engine"}
#: The meta-distribution: no code, the three layers pinned exactly (`pip install walqueue`).
META = "walqueue"

# Imports every layer and prints where each module came from.
IMPORT_ALL = """if True:
    import walqueue, walqueue.format, walqueue.cli
    from walqueue import Queue
    assert walqueue.CorruptStore is walqueue.format.CorruptStore
    for module in (walqueue, walqueue.format, walqueue.cli):
        print(module.__file__)
"""


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command outside the repository, with no PYTHONPATH leaking in."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def check(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result


@dataclass(frozen=True)
class Build:
    directory: Path
    wheels: dict[str, Path]  # the three layers'
    sdists: dict[str, Path]
    meta_wheel: Path
    meta_sdist: Path


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment; pip is run from outside it (`pip --python`)."""

    root: Path
    pip_command: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def script(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def pip_install(self, *args: str | Path) -> None:
        command = [*self.pip_command, "--python", str(self.python), "install", "--no-index", *map(str, args)]
        check(run(command, cwd=self.root))

    def python_code(self, code: str) -> subprocess.CompletedProcess[str]:
        # -I: no PYTHONPATH, no user site, no current directory on sys.path.
        return run([str(self.python), "-I", "-c", code], cwd=self.root)


def distribution_of(filename: str) -> str:
    """`walqueue_engine-0.1.0-py3-none-any.whl` -> `walqueue-engine`."""
    return filename.split("-")[0].replace("_", "-")


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    out = tmp_path_factory.mktemp("dist")
    check(run([sys.executable, str(REPO_ROOT / "tools" / "release.py"), "build", "--out", str(out)], cwd=out))
    wheels = {distribution_of(path.name): path for path in out.glob("*.whl")}
    sdists = {distribution_of(path.name): path for path in out.glob("*.tar.gz")}
    assert set(wheels) == set(sdists) == {*DISTRIBUTIONS, META}, sorted(path.name for path in out.iterdir())
    meta_wheel, meta_sdist = wheels.pop(META), sdists.pop(META)
    return Build(directory=out, wheels=wheels, sdists=sdists, meta_wheel=meta_wheel, meta_sdist=meta_sdist)


@pytest.fixture(scope="session")
def pip_command(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """A pip able to install into other environments (`--python`, pip >= 22.3).

    The running interpreter's own pip when it has one, else one venv with pip:
    the fresh environments are then made without pip, which is much faster.
    """
    if importlib.util.find_spec("pip") is not None:
        return (sys.executable, "-m", "pip")
    tool = tmp_path_factory.mktemp("pip-tool")
    check(run([sys.executable, "-m", "venv", str(tool)], cwd=tool))
    return (str(tool / "bin" / "python"), "-m", "pip")


@pytest.fixture(scope="session")
def build_backend_wheels(tmp_path_factory: pytest.TempPathFactory, pip_command: tuple[str, ...]) -> Path:
    """hatchling and its requirements as wheels, for builds under `--no-index`.

    `editables` is what hatchling asks for on top to build an editable wheel.
    """
    directory = tmp_path_factory.mktemp("build-backend")
    command = [*pip_command, "download", "--only-binary=:all:", "-d", str(directory), "hatchling", "editables"]
    check(run(command, cwd=directory))
    return directory


@pytest.fixture
def new_venv(tmp_path: Path, pip_command: tuple[str, ...]) -> Iterator[Venv]:
    root = tmp_path / "venv"
    check(run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=tmp_path))
    yield Venv(root=root, pip_command=pip_command)


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def assert_scripts_answer_help(venv: Venv, *names: str) -> None:
    for name in names:
        result = run([venv.script(name), "--help"], cwd=venv.root)
        assert result.returncode == 0, f"{name} --help: {result.stderr}"
        assert result.stdout.strip(), f"{name} --help printed nothing"


# --- what the wheels hold ----------------------------------------------------


def test_no_file_is_shipped_by_two_wheels(build: Build) -> None:
    seen: dict[str, str] = {}
    for dist, wheel in build.wheels.items():
        for name in wheel_files(wheel):
            assert name not in seen, f"{name} is in both {seen[name]} and {dist}"
            seen[name] = dist


def test_only_the_engine_wheel_ships_walqueue_init(build: Build) -> None:
    owners = [dist for dist, wheel in build.wheels.items() if "walqueue/__init__.py" in wheel_files(wheel)]
    assert owners == ["walqueue-engine"]


#: The directories each distribution ships (the consumers' layer holds the CLI, the worker and the dashboard).
OWNED_DIRECTORIES = {
    "walqueue-format": ("walqueue/format/",),
    "walqueue-engine": ("walqueue/",),
    "walqueue-cli": (
        "walqueue/backup/",
        "walqueue/cli/",
        "walqueue/client/",
        "walqueue/dashboard/",
        "walqueue/protocol/",
        "walqueue/serve/",
        "walqueue/worker/",
    ),
}


#: The optional extras, never installed unless asked for: s3:// replicas (walqueue.backup.s3; DECISIONS §34).
OPTIONAL_EXTRAS = {"walqueue-cli": ["boto3>=1.35; extra == 's3'"]}


def owner_of(name: str) -> str:
    """The distribution one of whose directories is the longest prefix of `name`."""
    owners = [(prefix, dist) for dist, owned in OWNED_DIRECTORIES.items() for prefix in owned]
    owners = [(prefix, dist) for prefix, dist in owners if name.startswith(prefix)]
    return max(owners, key=lambda owner: len(owner[0]), default=("", "nobody"))[1]


def test_each_wheel_holds_only_its_own_subpackage_and_its_py_typed(build: Build) -> None:
    for dist, wheel in build.wheels.items():
        files = wheel_files(wheel)
        assert PY_TYPED[dist] in files
        strays = sorted(name for name in files if owner_of(name) != dist)
        assert strays == [], f"{dist} ships files of another distribution: {strays}"


def test_wheel_metadata_pins_the_layer_below_exactly(build: Build) -> None:
    versions = set()
    for dist, wheel in build.wheels.items():
        metadata = wheel_metadata(wheel)
        versions.add(metadata["Version"])
        assert metadata["Requires-Python"] == ">=3.12"
        below = PINNED_BELOW[dist]
        expected = [f"{below}=={metadata['Version']}"] if below else []
        expected += OPTIONAL_EXTRAS.get(dist, [])
        assert (metadata.get_all("Requires-Dist") or []) == expected, dist
    assert len(versions) == 1, versions


# --- how they install --------------------------------------------------------


def test_the_three_wheels_install_offline_and_work_together(build: Build, new_venv: Venv) -> None:
    # Asking for the CLI alone must pull the engine and the format layer
    # through the exact pins, from the build directory only.
    new_venv.pip_install("--find-links", build.directory, "walqueue-cli")
    result = check(new_venv.python_code(IMPORT_ALL))
    for module_file in result.stdout.splitlines():
        assert Path(module_file).is_relative_to(new_venv.root), module_file
    assert_scripts_answer_help(new_venv, "walqueue", "walqueue-serve", "walqueue-fsck")


def test_editable_install_of_all_three_serves_the_working_tree(build_backend_wheels: Path, new_venv: Venv) -> None:
    new_venv.pip_install(
        "--find-links",
        build_backend_wheels,
        *(arg for dist in DISTRIBUTIONS for arg in ("-e", str(REPO_ROOT / "packages" / dist))),
    )
    result = check(new_venv.python_code(IMPORT_ALL))
    owners = ("walqueue-engine", "walqueue-format", "walqueue-cli")  # of walqueue, walqueue.format, walqueue.cli
    for module_file, dist in zip(result.stdout.splitlines(), owners, strict=True):
        assert Path(module_file).is_relative_to(REPO_ROOT / "packages" / dist / "src"), module_file
    assert_scripts_answer_help(new_venv, "walqueue", "walqueue-serve", "walqueue-fsck")


def test_the_format_wheel_alone_gives_fsck_and_no_queue(build: Build, new_venv: Venv) -> None:
    new_venv.pip_install(build.wheels["walqueue-format"])
    check(new_venv.python_code("import walqueue.format"))
    no_queue = new_venv.python_code("from walqueue import Queue")
    assert no_queue.returncode != 0
    assert "ImportError" in no_queue.stderr
    assert_scripts_answer_help(new_venv, "walqueue-fsck")
    assert not Path(new_venv.script("walqueue")).exists()
    assert not Path(new_venv.script("walqueue-serve")).exists()


@pytest.mark.parametrize(
    ("dist", "code"),
    [
        ("walqueue-format", "import walqueue.format"),
        ("walqueue-engine", "from walqueue import Queue; import walqueue.format"),
        ("walqueue-cli", "import walqueue.cli, walqueue.format; from walqueue import Queue"),
    ],
)
def test_each_distribution_installs_from_its_own_directory(
    build: Build, build_backend_wheels: Path, new_venv: Venv, dist: str, code: str
) -> None:
    # The layers below come as wheels from --find-links; the build backend too.
    new_venv.pip_install(
        "--find-links", build.directory, "--find-links", build_backend_wheels, REPO_ROOT / "packages" / dist
    )
    check(new_venv.python_code(code))


def test_the_meta_wheel_holds_no_code_and_pins_all_three_layers(build: Build) -> None:
    assert wheel_files(build.meta_wheel) == set()
    metadata = wheel_metadata(build.meta_wheel)
    version = metadata["Version"]
    assert {wheel_metadata(wheel)["Version"] for wheel in build.wheels.values()} == {version}
    assert sorted(metadata.get_all("Requires-Dist") or []) == sorted(f"{dist}=={version}" for dist in DISTRIBUTIONS)
    assert metadata["License-Expression"] == "Apache-2.0" and metadata.get_all("License-File") == ["LICENSE"]
    with tarfile.open(build.meta_sdist) as archive:
        assert [m.name for m in archive.getmembers() if m.name.endswith("/LICENSE")]


def test_pip_install_walqueue_brings_all_three_layers(build: Build, new_venv: Venv) -> None:
    new_venv.pip_install("--find-links", build.directory, META)
    result = check(new_venv.python_code(IMPORT_ALL))
    for module_file in result.stdout.splitlines():
        assert Path(module_file).is_relative_to(new_venv.root), module_file
    assert_scripts_answer_help(new_venv, "walqueue", "walqueue-serve", "walqueue-worker", "walqueue-fsck")
    versions = check(
        new_venv.python_code(
            f"import importlib.metadata as m; print(*(m.version(d) for d in {(*DISTRIBUTIONS, META)!r}))"
        )
    )
    assert len(set(versions.stdout.split())) == 1, versions.stdout


# --- licence, versions and the READMEs' install lines ---------------------------


def test_every_wheel_ships_the_license_and_declares_apache_2_0(build: Build) -> None:
    root_license = (REPO_ROOT / "LICENSE").read_bytes()
    for dist, wheel in build.wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            licenses = [name for name in archive.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
            assert len(licenses) == 1, (dist, archive.namelist())
            assert archive.read(licenses[0]) == root_license, dist
        metadata = wheel_metadata(wheel)
        assert metadata["License-Expression"] == "Apache-2.0", dist
        assert metadata.get_all("License-File") == ["LICENSE"], dist
        assert metadata["Author"] == "The WALQueue authors", dist
        assert not metadata.get_all("Project-URL"), dist
        assert not metadata.get_all("Home-page"), dist


def test_every_sdist_ships_the_license(build: Build) -> None:
    root_license = (REPO_ROOT / "LICENSE").read_bytes()
    for dist, sdist in build.sdists.items():
        with tarfile.open(sdist) as archive:
            (name,) = [member.name for member in archive.getmembers() if member.name.endswith("/LICENSE")]
            assert name.count("/") == 1, name  # at the top of NAME-VERSION/
            extracted = archive.extractfile(name)
            assert extracted is not None and extracted.read() == root_license, dist


def test_installed_commands_and_modules_report_one_version(build: Build, new_venv: Venv) -> None:
    new_venv.pip_install("--find-links", build.directory, "walqueue-cli")
    version = wheel_metadata(build.wheels["walqueue-engine"])["Version"]
    code = """if True:
        import importlib.metadata, walqueue, walqueue.format
        print(walqueue.__version__, walqueue.format.__version__)
        print(*(importlib.metadata.version(d) for d in ("walqueue-format", "walqueue-engine", "walqueue-cli")))
    """
    result = check(new_venv.python_code(code))
    assert result.stdout.split() == [version] * 5
    for command, expected in (
        ([new_venv.script("walqueue"), "--version"], f"walqueue {version}"),
        ([new_venv.script("walqueue-fsck"), "--version"], f"walqueue-fsck {version}"),
        ([str(new_venv.python), "-m", "walqueue", "--version"], f"walqueue {version}"),
    ):
        shown = check(run(command, cwd=new_venv.root))
        assert shown.stdout.strip() == expected, command
    about = check(run([str(new_venv.python), "-m", "walqueue"], cwd=new_venv.root))
    assert "walqueue-fsck" in about.stdout and "walqueue.cli" in about.stdout


def readme_shell_lines(path: Path) -> list[str]:
    """The commands of a README's ```sh blocks, a backslash continuation joined to its next line."""
    lines: list[str] = []
    inside = False
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh" if not inside else False
            continue
        if inside and line.strip() and not line.lstrip().startswith("#"):
            if line.endswith("\\"):
                pending += line[:-1]
                continue
            lines.append(pending + line)
            pending = ""
    return lines


@pytest.mark.parametrize("dist", (*DISTRIBUTIONS, META))
def test_the_package_readme_install_lines_work_as_written(
    build: Build, build_backend_wheels: Path, tmp_path: Path, dist: str
) -> None:
    # Each line runs as written from the repository root, with three
    # substitutions only: the venv path, the interpreter, and the wheel
    # directory (built once by the fixture; `release.py build` itself is
    # tested by that fixture). The build backend comes from local wheels.
    venv = tmp_path / "walqueue-env"
    store = tmp_path / "store"
    store.mkdir()  # an empty directory: a healthy new store for walqueue-fsck
    env = {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(build_backend_wheels),
    }
    lines = readme_shell_lines(REPO_ROOT / "packages" / dist / "README.md")
    assert any("pip install" in line for line in lines), dist
    ran = 0
    for line in lines:
        if "tools/release.py build" in line or line.lstrip().startswith("|") or "walqueue /tmp/q" in line:
            continue  # the build (done by the fixture), the CLI example (tests/docs)
        command = (
            line.replace("~/walqueue-env", str(venv))
            .replace("python3.12 ", f"{sys.executable} ", 1)
            .replace("--find-links dist", f"--find-links {build.directory}")
            .replace("/path/to/queue-directory", str(store))
        )
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO_ROOT,
            env={**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        ran += 1
    assert ran >= 2, dist
