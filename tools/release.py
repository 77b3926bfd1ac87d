#!/usr/bin/env python3
"""Keep the four distributions on one version, and build them.

WALQueue ships three layers (walqueue-format, walqueue-engine, walqueue-cli)
and the meta-distribution `walqueue` (no code: `pip install walqueue` brings
all three), always at the same version, each layer pinning the layer below
it exactly (`walqueue-format==X.Y.Z`) and the meta pinning all three. The versions are static strings in each
`pyproject.toml` (plainer than a shared VERSION file plus build hooks, and an
sdist then builds on its own), and once more in the format layer's
`_version.py` (`__version__`, which the engine and the CLI re-use, so that a
source tree without an install knows its version too); this script is the one
way to move them all:

    python tools/release.py                  print the version
    python tools/release.py check            exit 1 if versions, pins or __version__ drift
    python tools/release.py bump X.Y.Z       rewrite all versions, pins and __version__ at once
    python tools/release.py build [--out D]  build the four sdists and wheels (default D: dist/)

`--root DIR` (before the command) works on another checkout; the tests use it
on a temporary copy. Standard library only, like the project.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

#: The distributions, bottom layer first; each layer pins the one before it, the meta `walqueue` all three.
DISTRIBUTIONS: tuple[str, ...] = ("walqueue-format", "walqueue-engine", "walqueue-cli", "walqueue")
PINNED: dict[str, tuple[str, ...]] = {
    "walqueue-format": (),
    "walqueue-engine": ("walqueue-format",),
    "walqueue-cli": ("walqueue-engine",),
    "walqueue": ("walqueue-format", "walqueue-engine", "walqueue-cli"),
}

# Final releases, pre-releases, post- and dev-releases; no epochs or local parts.
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?$")
VERSION_LINE_RE = re.compile(r'^(version\s*=\s*")([^"]*)(")', re.MULTILINE)
PIN_RE = re.compile(r'"(walqueue-(?:format|engine|cli))\s*==\s*([^"]*)"')
OUR_REQUIREMENT_RE = re.compile(r"^\s*walqueue[-_.](?:format|engine|cli)\b", re.IGNORECASE)

DEFAULT_ROOT = Path(__file__).resolve().parent.parent

#: The module that holds `__version__` for code (relative to the root).
VERSION_MODULE = Path("packages/walqueue-format/src/walqueue/format/_version.py")
DUNDER_VERSION_RE = re.compile(r'^(__version__\s*=\s*")([^"]*)(")', re.MULTILINE)


def pyproject_path(root: Path, dist: str) -> Path:
    return root / "packages" / dist / "pyproject.toml"


@dataclass(frozen=True)
class Manifest:
    """What one pyproject.toml says about its version and our own pins."""

    dist: str
    version: str
    pins: list[str]  # its requirements on our own distributions, as written


def read_manifest(root: Path, dist: str) -> Manifest:
    data = tomllib.loads(pyproject_path(root, dist).read_text(encoding="utf-8"))
    project = data.get("project", {})
    pins = [requirement for requirement in project.get("dependencies", []) if OUR_REQUIREMENT_RE.match(requirement)]
    return Manifest(dist=dist, version=str(project.get("version", "")), pins=pins)


def find_drift(root: Path) -> list[str]:
    """Every way the four pyproject.toml files disagree; empty when in lockstep."""
    problems: list[str] = []
    manifests: list[Manifest] = []
    for dist in DISTRIBUTIONS:
        try:
            manifests.append(read_manifest(root, dist))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            problems.append(f"{pyproject_path(root, dist)}: cannot read: {exc}")
    if problems:
        return problems
    versions = {m.dist: m.version for m in manifests}
    module_version = read_module_version(root)
    if module_version is None:
        problems.append(f"{root / VERSION_MODULE}: no readable '__version__ = \"...\"' line")
    elif module_version != versions[DISTRIBUTIONS[0]]:
        problems.append(
            f"{VERSION_MODULE} says __version__ = {module_version!r}, "
            f"{DISTRIBUTIONS[0]} says {versions[DISTRIBUTIONS[0]]!r}"
        )
    if len(set(versions.values())) != 1:
        listed = ", ".join(f"{dist} {version!r}" for dist, version in versions.items())
        problems.append(f"versions differ: {listed}")
    for manifest in manifests:
        if not VERSION_RE.match(manifest.version):
            problems.append(f"{manifest.dist}: version {manifest.version!r} is not X.Y.Z[aN|bN|rcN][.postN][.devN]")
        expected = [f"{pinned}=={manifest.version}" for pinned in PINNED[manifest.dist]]
        if manifest.pins != expected:
            problems.append(f"{manifest.dist}: requires {manifest.pins} of ours, expected {expected}")
    return problems


def read_module_version(root: Path) -> str | None:
    """The `__version__` string of VERSION_MODULE, or None if it is missing or has none."""
    try:
        text = (root / VERSION_MODULE).read_text(encoding="utf-8")
    except OSError:
        return None
    matches = DUNDER_VERSION_RE.findall(text)
    return matches[0][1] if len(matches) == 1 else None


def current_version(root: Path) -> str:
    problems = find_drift(root)
    if problems:
        raise SystemExit("release: versions drift:\n  " + "\n  ".join(problems))
    return read_manifest(root, DISTRIBUTIONS[0]).version


def bumped_text(text: str, new_version: str, where: Path) -> str:
    """`text` with its one [project] version and every pin of ours set to `new_version`."""
    new_text, count = VERSION_LINE_RE.subn(lambda m: m.group(1) + new_version + m.group(3), text)
    if count != 1:
        raise SystemExit(f"release: {where}: expected exactly one 'version = \"...\"' line, found {count}")
    return PIN_RE.sub(lambda m: f'"{m.group(1)}=={new_version}"', new_text)


def bumped_module_text(text: str, new_version: str, where: Path) -> str:
    """`text` with its one `__version__ = "..."` line set to `new_version`."""
    new_text, count = DUNDER_VERSION_RE.subn(lambda m: m.group(1) + new_version + m.group(3), text)
    if count != 1:
        raise SystemExit(f"release: {where}: expected exactly one '__version__ = \"...\"' line, found {count}")
    return new_text


def bump(root: Path, new_version: str) -> None:
    """Rewrite all four files, or none: every new text is checked before any is written."""
    if not VERSION_RE.match(new_version):
        raise SystemExit(f"release: {new_version!r} is not a version of the form X.Y.Z[aN|bN|rcN][.postN][.devN]")
    new_texts: dict[Path, str] = {}
    for dist in DISTRIBUTIONS:
        path = pyproject_path(root, dist)
        new_texts[path] = bumped_text(path.read_text(encoding="utf-8"), new_version, path)
    module_path = root / VERSION_MODULE
    new_texts[module_path] = bumped_module_text(module_path.read_text(encoding="utf-8"), new_version, module_path)
    with tempfile.TemporaryDirectory() as scratch:
        # Check the rewritten files as a whole tree before touching the real one.
        scratch_root = Path(scratch)
        for path, text in new_texts.items():
            target = scratch_root / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        problems = find_drift(scratch_root)
        if problems:
            raise SystemExit("release: the bump would leave drift:\n  " + "\n  ".join(problems))
    for path, text in new_texts.items():
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)


def run(command: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"release: command failed ({result.returncode}): {' '.join(command)}")
    return result.stdout


# Calls one PEP 517 hook of the backend named in argv[1] ("module" or
# "module:object") and prints its result; run inside the build environment.
HOOK_CALLER = """
import importlib, json, sys
module_name, _, attribute = sys.argv[1].partition(":")
backend = importlib.import_module(module_name)
for part in filter(None, attribute.split(".")):
    backend = getattr(backend, part)
hook = getattr(backend, sys.argv[2], None)
if hook is None:
    result = []  # an optional get_requires_* hook the backend does not define
else:
    result = hook(*sys.argv[3:])
print(json.dumps(result))
"""


def call_hook(python: Path, backend: str, hook: str, cwd: Path, *args: str) -> object:
    output = run([str(python), "-c", HOOK_CALLER, backend, hook, *args], cwd=cwd)
    return json.loads(output.strip().splitlines()[-1])


def install_requirements(pip: list[str], requirements: object) -> None:
    """Install what a `get_requires_for_build_*` hook asked for (usually nothing)."""
    if not isinstance(requirements, list):
        raise SystemExit(f"release: the build backend returned {requirements!r}, not a list of requirements")
    if requirements:
        run([*pip, *(str(requirement) for requirement in requirements)])


def build(root: Path, out: Path) -> list[Path]:
    """Build each distribution's sdist, then its wheel FROM that sdist.

    Building the wheel from the unpacked sdist (as `python -m build` does)
    proves the sdist is complete. The backend runs in one throw-away virtual
    environment holding the build requirements, fetched with pip.
    """
    version = current_version(root)
    out.mkdir(parents=True, exist_ok=True)
    artifacts: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="walqueue-build-") as scratch:
        scratch_dir = Path(scratch)
        env_dir = scratch_dir / "build-env"
        run([sys.executable, "-m", "venv", str(env_dir)])
        python = env_dir / "bin" / "python"
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", "install", "--quiet"]
        requirements: set[str] = set()
        backends: dict[str, str] = {}
        for dist in DISTRIBUTIONS:
            system = tomllib.loads(pyproject_path(root, dist).read_text(encoding="utf-8"))["build-system"]
            requirements.update(system["requires"])
            backends[dist] = system["build-backend"]
        run([*pip, *sorted(requirements)])
        for dist in DISTRIBUTIONS:
            source = root / "packages" / dist
            backend = backends[dist]
            extra = call_hook(python, backend, "get_requires_for_build_sdist", source)
            install_requirements(pip, extra)
            sdist = out / str(call_hook(python, backend, "build_sdist", source, str(out)))
            unpacked = scratch_dir / dist
            with tarfile.open(sdist) as archive:
                archive.extractall(unpacked, filter="data")
            (tree,) = unpacked.iterdir()  # an sdist holds one top-level NAME-VERSION directory
            extra = call_hook(python, backend, "get_requires_for_build_wheel", tree)
            install_requirements(pip, extra)
            wheel = out / str(call_hook(python, backend, "build_wheel", tree, str(out)))
            artifacts += [sdist, wheel]
    for artifact in artifacts:
        if version not in artifact.name:
            raise SystemExit(f"release: {artifact.name} does not carry version {version}")
    return artifacts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="repository root (default: this checkout)")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("version", help="print the version (the default)")
    commands.add_parser("check", help="exit 1 if versions or pins drift")
    bump_parser = commands.add_parser("bump", help="set every version and pin to VERSION")
    bump_parser.add_argument("version")
    build_parser = commands.add_parser("build", help="build the four sdists and wheels")
    build_parser.add_argument("--out", type=Path, default=None, help="output directory (default: ROOT/dist)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()

    if args.command in (None, "version"):
        print(current_version(root))
    elif args.command == "check":
        problems = find_drift(root)
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"release: all four distributions are at {current_version(root)}, pinned exactly")
    elif args.command == "bump":
        bump(root, args.version)
        print(f"release: version and pins set to {args.version} in all four pyproject.toml files and {VERSION_MODULE}")
    elif args.command == "build":
        out = (args.out if args.out is not None else root / "dist").resolve()
        for artifact in build(root, out):
            print(artifact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
