"""Rules of the repository's layout that need no build (fast).

One version for three distributions, each pinning the layer below exactly;
one owner for every file of the shared `walqueue` package; and the
no-install mode: the three src directories on PYTHONPATH are enough.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASE_SCRIPT = REPO_ROOT / "tools" / "release.py"
DISTRIBUTIONS = ("walqueue-format", "walqueue-engine", "walqueue-cli")
#: The directory each distribution contributes to the shared import package.
PACKAGE_DIRS = {
    "walqueue-format": "walqueue/format",
    "walqueue-engine": "walqueue",
    "walqueue-cli": "walqueue/cli",
}
PINNED_BELOW = {"walqueue-format": None, "walqueue-engine": "walqueue-format", "walqueue-cli": "walqueue-engine"}
#: The meta-distribution (`pip install walqueue`): no code, the three layers pinned exactly, the same version.
META = "walqueue"
ALL_DISTRIBUTIONS = (*DISTRIBUTIONS, META)


def expected_pins(dist: str, version: str) -> list[str]:
    if dist == META:
        return [f"{layer}=={version}" for layer in DISTRIBUTIONS]
    below = PINNED_BELOW[dist]
    return [f"{below}=={version}"] if below else []


#: The one `__version__` of the code, rewritten by `release.py bump` with the pyproject files.
VERSION_MODULE = Path("packages/walqueue-format/src/walqueue/format/_version.py")


def src_dir(dist: str) -> Path:
    return REPO_ROOT / "packages" / dist / "src"


def load_pyproject(root: Path, dist: str) -> dict[str, Any]:
    return tomllib.loads((root / "packages" / dist / "pyproject.toml").read_text(encoding="utf-8"))


def run_release(*args: str, root: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RELEASE_SCRIPT), "--root", str(root), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def copy_pyprojects(destination: Path) -> Path:
    """A scratch repository root holding copies of the four pyproject.toml files and of `_version.py`."""
    for dist in ALL_DISTRIBUTIONS:
        target = destination / "packages" / dist / "pyproject.toml"
        target.parent.mkdir(parents=True)
        shutil.copyfile(REPO_ROOT / "packages" / dist / "pyproject.toml", target)
    (destination / VERSION_MODULE).parent.mkdir(parents=True)
    shutil.copyfile(REPO_ROOT / VERSION_MODULE, destination / VERSION_MODULE)
    return destination


def module_version(root: Path) -> str:
    namespace: dict[str, object] = {}
    exec((root / VERSION_MODULE).read_text(encoding="utf-8"), namespace)
    return str(namespace["__version__"])


def run_without_install(code: str, dists: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` with only the given src directories importable.

    `-S` skips site-packages, so an installed or editable copy in the running
    environment cannot hide a broken PYTHONPATH layout.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(src_dir(dist)) for dist in dists)
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


# --- one version -------------------------------------------------------------


def test_all_four_distributions_carry_one_version() -> None:
    versions = {dist: load_pyproject(REPO_ROOT, dist)["project"]["version"] for dist in ALL_DISTRIBUTIONS}
    assert len(set(versions.values())) == 1, versions


def test_each_layer_pins_the_layer_below_exactly_and_nothing_else() -> None:
    for dist in ALL_DISTRIBUTIONS:
        project = load_pyproject(REPO_ROOT, dist)["project"]
        assert project.get("dependencies", []) == expected_pins(dist, project["version"]), dist


def test_the_meta_distribution_ships_no_code() -> None:
    data = load_pyproject(REPO_ROOT, META)
    assert data["project"]["name"] == "walqueue"
    assert data["tool"]["hatch"]["build"]["targets"]["wheel"] == {"bypass-selection": True}
    assert not (REPO_ROOT / "packages" / META / "src").exists()
    assert "scripts" not in data["project"]


def test_release_check_accepts_the_repository() -> None:
    result = run_release("check")
    assert result.returncode == 0, result.stderr


def test_release_prints_the_shared_version() -> None:
    result = run_release()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == load_pyproject(REPO_ROOT, "walqueue-engine")["project"]["version"]


def test_release_bump_rewrites_every_version_and_pin_at_once(tmp_path: Path) -> None:
    root = copy_pyprojects(tmp_path)
    result = run_release("bump", "0.2.0rc1", root=root)
    assert result.returncode == 0, result.stderr
    for dist in ALL_DISTRIBUTIONS:
        project = load_pyproject(root, dist)["project"]
        assert project["version"] == "0.2.0rc1"
        assert project["dependencies"] == expected_pins(dist, "0.2.0rc1")
    assert module_version(root) == "0.2.0rc1"
    assert run_release("check", root=root).returncode == 0


def test_release_bump_keeps_everything_but_the_version_and_pins(tmp_path: Path) -> None:
    root = copy_pyprojects(tmp_path)
    assert run_release("bump", "0.2.0", root=root).returncode == 0
    for dist in ALL_DISTRIBUTIONS:
        before = (REPO_ROOT / "packages" / dist / "pyproject.toml").read_text(encoding="utf-8")
        old_version = load_pyproject(REPO_ROOT, dist)["project"]["version"]
        after = (root / "packages" / dist / "pyproject.toml").read_text(encoding="utf-8")
        assert after == before.replace(f'"{old_version}"', '"0.2.0"').replace(f"=={old_version}", "==0.2.0")


def test_release_bump_refuses_a_malformed_version_and_writes_nothing(tmp_path: Path) -> None:
    root = copy_pyprojects(tmp_path)
    before = {dist: (root / "packages" / dist / "pyproject.toml").read_bytes() for dist in ALL_DISTRIBUTIONS}
    version_before = (root / VERSION_MODULE).read_bytes()
    result = run_release("bump", "0.2", root=root)
    assert result.returncode != 0
    assert {dist: (root / "packages" / dist / "pyproject.toml").read_bytes() for dist in ALL_DISTRIBUTIONS} == before
    assert (root / VERSION_MODULE).read_bytes() == version_before


def test_the_code_carries_the_version_of_the_pyproject_files() -> None:
    assert module_version(REPO_ROOT) == load_pyproject(REPO_ROOT, "walqueue-format")["project"]["version"]


def test_release_check_fails_when_dunder_version_drifts(tmp_path: Path) -> None:
    root = copy_pyprojects(tmp_path)
    path = root / VERSION_MODULE
    path.write_text(path.read_text(encoding="utf-8").replace('__version__ = "', '__version__ = "9.', 1))
    result = run_release("check", root=root)
    assert result.returncode == 1
    assert "__version__" in result.stderr


# --- licence and authors ----------------------------------------------------


def test_the_root_license_is_the_apache_license_2_0() -> None:
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    for heading in (
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "2. Grant of Copyright License.",
        "3. Grant of Patent License.",
        "4. Redistribution.",
        "7. Disclaimer of Warranty.",
        "8. Limitation of Liability.",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ):
        assert heading in text, heading
    assert len(text.split()) > 1500  # the full text, not a summary


def test_each_distribution_carries_an_identical_copy_of_the_license() -> None:
    # An sdist is built from its package folder alone, so each needs its own copy.
    root_license = (REPO_ROOT / "LICENSE").read_bytes()
    for dist in ALL_DISTRIBUTIONS:
        assert (REPO_ROOT / "packages" / dist / "LICENSE").read_bytes() == root_license, dist


def test_each_distribution_declares_apache_2_0_and_its_authors_and_no_url() -> None:
    for dist in ALL_DISTRIBUTIONS:
        data = load_pyproject(REPO_ROOT, dist)
        project = data["project"]
        assert project["license"] == "Apache-2.0", dist  # PEP 639: an SPDX expression
        assert project["license-files"] == ["LICENSE"], dist
        assert project["authors"] == [{"name": "The WALQueue authors"}], dist
        assert "urls" not in project, dist  # the project has no home page to point at yet
        assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")], dist
        assert data["build-system"]["requires"] == ["hatchling>=1.27"], dist  # PEP 639 support


@pytest.mark.parametrize(
    ("dist", "old", "new"),
    [
        ("walqueue-cli", 'version = "0.', 'version = "9.'),
        ("walqueue-engine", '"walqueue-format==', '"walqueue-format>='),
        ("walqueue-cli", '"walqueue-engine==', '"walqueue-engine==9.9.9", "walqueue-engine=='),
        ("walqueue", 'version = "0.', 'version = "9.'),
        ("walqueue", '"walqueue-cli==', '"walqueue-cli>='),
        ("walqueue", '"walqueue-cli==', '"walqueue-engine=='),
    ],
    ids=["version", "loose-pin", "second-pin", "meta-version", "meta-loose-pin", "meta-missing-layer"],
)
def test_release_check_fails_when_versions_or_pins_drift(tmp_path: Path, dist: str, old: str, new: str) -> None:
    root = copy_pyprojects(tmp_path)
    path = root / "packages" / dist / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    result = run_release("check", root=root)
    assert result.returncode == 1
    assert dist in result.stderr


# --- who ships what ----------------------------------------------------------


def test_only_the_engine_source_tree_has_walqueue_init() -> None:
    owners = [dist for dist in DISTRIBUTIONS if (src_dir(dist) / "walqueue" / "__init__.py").exists()]
    assert owners == ["walqueue-engine"]


def test_each_distribution_has_its_own_py_typed_marker() -> None:
    for dist, package_dir in PACKAGE_DIRS.items():
        assert (src_dir(dist) / package_dir / "py.typed").is_file(), dist


def test_every_distribution_builds_src_walqueue_for_python_312_and_later() -> None:
    for dist in DISTRIBUTIONS:
        data = load_pyproject(REPO_ROOT, dist)
        assert data["project"]["requires-python"] == ">=3.12"
        assert data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/walqueue"]
        assert (REPO_ROOT / "packages" / dist / data["project"]["readme"]).is_file()


def test_console_scripts_name_a_main_in_their_own_distribution() -> None:
    expected = {
        "walqueue-format": {"walqueue-fsck"},
        "walqueue-engine": set(),
        "walqueue-cli": {"walqueue", "walqueue-serve", "walqueue-worker", "walqueue-restore"},
    }
    for dist in DISTRIBUTIONS:
        scripts: dict[str, str] = load_pyproject(REPO_ROOT, dist)["project"].get("scripts", {})
        assert set(scripts) == expected[dist]
        for target in scripts.values():
            module, _, function = target.partition(":")
            assert function == "main"
            module_file = src_dir(dist) / (module.replace(".", "/") + ".py")
            assert module_file.is_file(), f"{target}: {module_file} is missing"


def test_root_is_a_workspace_and_its_tools_search_exactly_the_three_src_dirs() -> None:
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "project" not in root
    src_dirs = [f"packages/{dist}/src" for dist in DISTRIBUTIONS]
    assert root["tool"]["pytest"]["ini_options"]["pythonpath"] == src_dirs
    assert root["tool"]["mypy"]["mypy_path"] == src_dirs
    assert root["tool"]["hatch"]["envs"]["default"]["workspace"]["members"] == ["packages/*"]


def test_hatch_test_pins_the_same_tools_as_requirements_test_txt() -> None:
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    hatch_pins = set(root["tool"]["hatch"]["envs"]["hatch-test"]["extra-dependencies"])
    lines = (REPO_ROOT / "requirements-test.txt").read_text(encoding="utf-8").splitlines()
    requirement_pins = {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}
    assert hatch_pins <= requirement_pins, hatch_pins - requirement_pins


# --- no-install mode ---------------------------------------------------------


def test_no_install_mode_imports_every_layer_from_the_src_dirs(tmp_path: Path) -> None:
    code = """if True:
        import walqueue, walqueue.format, walqueue.cli, walqueue.engine
        from walqueue import Queue
        for module in (walqueue, walqueue.format, walqueue.cli, walqueue.engine):
            print(module.__file__)
    """
    result = run_without_install(code, DISTRIBUTIONS, tmp_path)
    assert result.returncode == 0, result.stderr
    files = [Path(line) for line in result.stdout.splitlines()]
    assert files == [
        src_dir("walqueue-engine") / "walqueue" / "__init__.py",
        src_dir("walqueue-format") / "walqueue" / "format" / "__init__.py",
        src_dir("walqueue-cli") / "walqueue" / "cli" / "__init__.py",
        src_dir("walqueue-engine") / "walqueue" / "engine" / "__init__.py",
    ]


def test_no_install_mode_corrupt_store_is_the_format_layers_class(tmp_path: Path) -> None:
    code = """if True:
        import walqueue, walqueue.format
        assert walqueue.CorruptStore is walqueue.format.CorruptStore
    """
    result = run_without_install(code, DISTRIBUTIONS, tmp_path)
    assert result.returncode == 0, result.stderr


def test_no_install_mode_gives_one_version_everywhere(tmp_path: Path) -> None:
    version = load_pyproject(REPO_ROOT, "walqueue-engine")["project"]["version"]
    code = """if True:
        import walqueue, walqueue.format
        print(walqueue.__version__, walqueue.format.__version__)
    """
    result = run_without_install(code, DISTRIBUTIONS, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [version, version]
    for module, name in (
        ("walqueue", "walqueue"),
        ("walqueue.cli", "walqueue"),
        ("walqueue.format.fsck", "walqueue-fsck"),
    ):
        shown = run_without_install(
            f"import runpy, sys; sys.argv = ['x', '--version']; runpy.run_module({module!r}, run_name='__main__')",
            DISTRIBUTIONS,
            tmp_path,
        )
        assert shown.returncode == 0, (module, shown.stderr)
        assert shown.stdout.strip() == f"{name} {version}", module


def test_format_layer_alone_imports_without_the_engine(tmp_path: Path) -> None:
    code = """if True:
        import walqueue.format
        try:
            from walqueue import Queue
        except ImportError:
            print("no Queue")
    """
    result = run_without_install(code, ("walqueue-format",), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no Queue"
