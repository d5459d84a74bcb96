"""A probe, not a build step: export a commit twice under /tmp and Cython-compile one copy's start path.

    .venv/bin/python benchmarks/support/compile_start_path.py 77230a7 /tmp/cyp

makes `<out>/plain` (the commit as it is: ext/*.pyx built, every module bytecode-compiled) and
`<out>/compiled` (the same, plus the plain Python modules a turn start runs, compiled by Cython in
pure-Python mode, unchanged, each beside its .py so the import system picks the .so). A module that
fails to compile, or whose .so fails to import, is dropped (its .so removed) and named in
`<out>/compiled/probe.json` with the reason. Run the benchmarks with BENCH_SRC=<out>/<plain|compiled>/src.

    .venv/bin/python benchmarks/support/compile_start_path.py 77230a7 /tmp/cyp --wide <plain loop profile>

makes `<out>/wide` instead: every cursor_byok module the cProfile of the plain tree's loop thread
(`BENCH_CPROFILE`'s `<prefix>-ours-1.prof`) saw called, compiled (the hot path's pure-Python twins
and the package façades aside), to tell a too-narrow list from no gain at all.
"""
from __future__ import annotations

import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "cursor_byok"
# The modules a start runs most (issue 35's profile): the wire, the gateway, the conversation and its
# history, the engine, the store's start commit, the provider request.
START_PATH = (
    "gateway/app.py gateway/bidi.py gateway/stream.py gateway/pending.py gateway/guard.py "
    "protocol/bidi.py protocol/headers.py protocol/ids.py "
    "conversation/runtime.py conversation/inbox.py conversation/service.py conversation/data.py "
    "conversation/intake.py conversation/active_run.py conversation/run_setup.py "
    "conversation/persistence.py conversation/presenter.py conversation/output.py "
    "conversation/history/checkpoint.py conversation/history/derived.py conversation/history/entry.py "
    "conversation/history/log.py conversation/history/request.py conversation/history/stored.py "
    "conversation/history/turns.py "
    "run/engine.py run/eager.py "
    "store/core.py store/writer.py store/ops.py store/conversations.py store/history.py "
    "providers/fragments.py providers/openai_chat.py providers/transport.py "
    "http_client.py"
).split()
# Cython's own optimisations only: no directive that changes Python semantics (annotation typing off,
# so `x: int` stays a Python object and no behaviour differs from the interpreted module).
DIRECTIVES = ["-X", "annotation_typing=False", "-X", "binding=True"]
# Modules that compile and import but break a turn when compiled (found by bisecting the wide tree on
# tests/e2e/test_transport.py): left interpreted.
BREAKS_WHEN_COMPILED = {
    # `del state.root_prompt_messages_json[-1]`: Cython deletes an item of a type flagged a sequence
    # by its sq_ass_item slot with no value, which upb's repeated container does not handle (the
    # server segfaults at the turn's end; CPython deletes through the mapping slot).
    "conversation/checkpoints.py": "segfault at the turn's end (upb repeated container, del x[-1])",
}


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


def export(commit: str, dest: Path) -> None:
    """The commit's tree at dest, with the hot-path extensions built in place and bytecode compiled."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    built = _run([sys.executable, "setup.py", "build_ext", "--inplace"], dest,
                 {**os.environ, "CURSOR_BYOK_REQUIRE_COMPILED": "1"})
    if built.returncode:
        raise SystemExit(built.stderr)
    _run([sys.executable, "-m", "compileall", "-q", "src"], dest)


def _cythonize(package: Path, module: str) -> tuple[str, str | None]:
    done = _run([str(Path(sys.executable).parent / "cythonize"), "-i", "-3", *DIRECTIVES, module], package)
    if done.returncode:
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "Error" in line or ":" in line]
        return module, "compile: " + " | ".join(errors[-3:])
    return module, None


def _imports(src: Path, module: str) -> str | None:
    """None when the compiled module imports (and is the .so), else why not."""
    name = PACKAGE + "." + module.removesuffix(".py").replace("/", ".")
    probe = f"import importlib; m = importlib.import_module({name!r}); assert m.__file__.endswith('.so'), m.__file__"
    done = _run([sys.executable, "-c", probe], src, {**os.environ, "PYTHONPATH": str(src)})
    return None if done.returncode == 0 else "import: " + (done.stderr.strip().splitlines() or ["?"])[-1]


def modules_called(profile: Path) -> tuple[str, ...]:
    """The package's modules with a function call in a cProfile file (paths under the package)."""
    called = set()
    for filename, _line, _name in pstats.Stats(str(profile)).stats:  # type: ignore[attr-defined]
        found = re.search(PACKAGE + r"/(.+\.py)$", filename)
        if found and not found.group(1).endswith(("__init__.py", "_py.py")) and found.group(1) not in BREAKS_WHEN_COMPILED:
            called.add(found.group(1))
    return tuple(sorted(called))


def compile_start_path(src: Path, modules: tuple[str, ...] = tuple(START_PATH)) -> dict[str, object]:
    package = src / PACKAGE
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = dict(pool.map(lambda m: _cythonize(package, m), modules))
    build_seconds = time.monotonic() - started
    for module, failure in list(results.items()):
        if failure is None:
            results[module] = _imports(src, module)
    dropped = {m: why for m, why in results.items() if why}
    for module in dropped:
        for built in (package / module).parent.glob(Path(module).stem + ".cpython-*.so"):
            built.unlink()
    for module in modules:  # the generated C is not needed to run
        (package / module).with_suffix(".c").unlink(missing_ok=True)
    shutil.rmtree(src / "build", ignore_errors=True)  # cythonize's copies of the same .so files
    sizes = {m: next((package / m).parent.glob(Path(m).stem + ".cpython-*.so")).stat().st_size
             for m in modules if m not in dropped}
    return {
        "build_seconds": round(build_seconds, 1),
        "compiled": sorted(sizes),
        "so_bytes_total": sum(sizes.values()),
        "py_bytes_total": sum((package / m).stat().st_size for m in sizes),
        "dropped": dropped,
    }


def main() -> None:
    commit, out = sys.argv[1], Path(sys.argv[2])
    if sys.argv[3:4] == ["--wide"]:
        trees = {"wide": modules_called(Path(sys.argv[4]))}
    else:
        export(commit, out / "plain")
        trees = {"compiled": tuple(START_PATH)}
    for name, modules in trees.items():
        export(commit, out / name)
        report = compile_start_path(out / name / "src", modules)
        (out / name / "probe.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
