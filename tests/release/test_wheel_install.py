"""The release wheel as a user meets it: installed into a fresh venv with no compiler on PATH, it
reports its compiled hot path in `doctor` and serves a scripted turn with a tool call. The sdist
where no compiler works: the pure-Python hot path, one warning, and `doctor` saying so. The
cibuildwheel configuration for macOS and Windows, as cibuildwheel reads it. (One module: the
session's one sdist is built once per test worker.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import uuid
import zipfile
from pathlib import Path

import pytest

from cursor_byok import __version__
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import Release

COMPILERS = ("cc", "gcc", "clang", "c++", "g++")
HOT_MODULES = ("frames", "prefix", "seqno", "wire")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh_bin(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding only the wheel and its dependencies (binary wheels from the index or
    pip's cache): its bin/ is the whole PATH, so no compiler could have been used."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PATH": str(bin_dir)}
    assert [c for c in COMPILERS if shutil.which(c, path=env["PATH"])] == []
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--only-binary", ":all:", str(release.wheel)],
        env=env, cwd=venv, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return bin_dir


def user_env(bin_dir: Path, home: Path) -> dict[str, str]:
    """What a user's shell would give the installed command: its venv on PATH, their own home."""
    home.mkdir(exist_ok=True)
    keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CURSOR_BYOK_CONFIG")}
    return keep | {"PATH": str(bin_dir), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".data")}


def test_wheel_is_manylinux_and_carries_the_compiled_hot_path(release: Release) -> None:
    assert f"-{__version__}-" in release.wheel.name
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert f"-{tag}-{tag}-" in release.wheel.name and "manylinux" in release.wheel.name
    names = zipfile.ZipFile(release.wheel).namelist()
    for module in HOT_MODULES:
        assert any(n.startswith(f"cursor_byok/hotpath/_{module}.") and n.endswith(".so") for n in names), names
    assert not [n for n in names if n.endswith((".pyx", ".c"))]


def test_sdist_builds_the_hot_path_from_its_cython_sources(release: Release) -> None:
    root = f"cursor_byok-{__version__}"
    names = set(tarfile.open(release.sdist).getnames())
    for module in HOT_MODULES:
        assert f"{root}/ext/{module}.pyx" in names
        assert f"{root}/ext/{module}.c" not in names  # generated at build time, never shipped stale
    assert {f"{root}/setup.py", f"{root}/pyproject.toml", f"{root}/MANIFEST.in"} <= names


def test_installed_command_reports_the_one_version(fresh_bin: Path, tmp_path: Path) -> None:
    env = user_env(fresh_bin, tmp_path / "home")
    done = subprocess.run([str(fresh_bin / "cursor-byok"), "--version"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"cursor-byok {__version__}"
    probe = "import importlib.metadata as m, cursor_byok; print(m.version('cursor-byok'), cursor_byok.__file__)"
    done = subprocess.run([str(fresh_bin / "python"), "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    version, location = done.stdout.split()
    assert version == __version__
    assert Path(location).is_relative_to(fresh_bin.parent)  # the installed copy, not this checkout


def test_doctor_in_the_fresh_venv_finds_the_compiled_hot_path(fresh_bin: Path, tmp_path: Path) -> None:
    env = user_env(fresh_bin, tmp_path / "home") | {"CURSOR_BYOK_REQUIRE_COMPILED": "1"}
    done = subprocess.run([str(fresh_bin / "cursor-byok"), "doctor"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = ", ".join(f"{m}=compiled" for m in HOT_MODULES)
    assert f"ok    hot path: {compiled}" in done.stdout.splitlines()


async def test_installed_wheel_serves_a_scripted_turn(fresh_bin: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("installed from a wheel\n")
    with FakeProviderServer() as provider:
        provider.enqueue(
            OPENAI_CHAT.tool_calls([CallSpec("c_read", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])]),
            OPENAI_CHAT.text(["the notes say so"]),
        )
        config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="byok-wheel", provider="openai-chat", base_url=provider.url + "/v1")])
        env = user_env(fresh_bin, tmp_path / "home") | {"CURSOR_BYOK_REQUIRE_COMPILED": "1"}
        with ServerProcess(config, env=env, cursor_byok=fresh_bin / "cursor-byok") as server:
            ide = ScriptedIDE(server.base_url, workspace)
            try:
                log = await ide.turn(run_request("what do the notes say?", model="byok-wheel", conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
            finally:
                await ide.close()
        assert log.text == "the notes say so" and log.terminal is None
        tool_result = [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"][0]
        assert "installed from a wheel" in tool_result["content"]


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
