"""A source install where no C compiler works: the pure-Python hot path, one clear warning, and
`doctor` saying so. Plus the committed cibuildwheel configuration, as cibuildwheel itself reads it."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from .conftest import Release

REPO = Path(__file__).resolve().parents[2]


def test_the_sdist_installs_without_a_compiler_and_doctor_says_pure_python(sdist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The runtime dependencies are wheels (no compiler either way): borrowed from this environment
    # so the one pip run below builds only cursor-byok itself.
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    env.pop("CURSOR_BYOK_REQUIRE_COMPILED", None)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-cache-dir", "-v", str(sdist)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    output = done.stdout + done.stderr
    assert output.count("cursor-byok: WARNING: no C compiler") == 1, output[-4000:]
    installed = site / "cursor_byok" / "hotpath"
    assert not list(installed.glob("_*.so"))
    doctor = subprocess.run([str(venv / "bin" / "cursor-byok"), "doctor"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    line = next(line for line in doctor.stdout.splitlines() if "hot path" in line)
    assert "hot path: pure Python (slower:" in line, line


def test_the_release_sdist_carries_the_pure_python_twins(release: Release) -> None:
    import tarfile

    with tarfile.open(release.sdist) as archive:
        names = archive.getnames()
    for twin in ("frames_py.py", "seqno_py.py", "prefix_py.py", "wire_py.py"):
        assert any(name.endswith(f"cursor_byok/hotpath/{twin}") for name in names), twin


def test_cibuildwheel_accepts_the_committed_configuration() -> None:
    exe = Path(sys.executable).with_name("cibuildwheel")
    found: dict[str, list[str]] = {}
    for platform in ("macos", "windows"):
        done = subprocess.run(
            [str(exe), "--print-build-identifiers", "--platform", platform], capture_output=True, text=True, cwd=REPO, timeout=120,
        )
        assert done.returncode == 0, done.stderr
        found[platform] = done.stdout.split()
    for version in ("cp311", "cp312", "cp313"):
        assert f"{version}-macosx_x86_64" in found["macos"]
        assert f"{version}-macosx_arm64" in found["macos"]
        assert f"{version}-win_amd64" in found["windows"]
    assert not any(ident.startswith(("pp", "cp310")) for ids in found.values() for ident in ids)
