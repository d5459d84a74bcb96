"""Directory is architecture: the dependency rules of ARCHITECTURE.md, checked on the source tree."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cursor_byok"


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the cursor_byok modules a file imports (relative imports resolved)."""
    package = ["cursor_byok", *path.relative_to(SRC).parent.parts]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("cursor_byok"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module.startswith("cursor_byok"):
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def files(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", ["providers", "run", "prompting"])
def test_model_side_never_imports_the_cursor_protocol(folder: str) -> None:
    offenders = {str(p.relative_to(SRC)): sorted(n for n in imported_modules(p) if n.startswith(("cursor_byok.protocol", "cursor_byok.conversation", "cursor_byok.gateway"))) for p in files(folder)}
    assert not {k: v for k, v in offenders.items() if v}


def test_tools_never_import_the_conversation_runtime() -> None:
    offenders = {str(p.relative_to(SRC)): sorted(n for n in imported_modules(p) if n.startswith("cursor_byok.conversation")) for p in files("tools")}
    assert not {k: v for k, v in offenders.items() if v}


def test_other_folders_use_only_public_facades() -> None:
    """Outside a folder, only its package (__init__) is imported, never a private module inside it.
    The generated protobuf modules are re-exported by `protocol` and reached through it."""
    folders = [p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    offenders: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        own = path.relative_to(SRC).parts[0]
        for name in imported_modules(path):
            parts = name.split(".")
            if len(parts) >= 3 and parts[1] in folders and parts[1] != own:
                target = SRC.joinpath(*parts[1:3])
                # `from cursor_byok.x import name` is fine when `name` is not a module of x.
                if target.with_suffix(".py").exists() or (target / "__init__.py").exists():
                    offenders.setdefault(str(path.relative_to(SRC)), []).append(name)
    assert not offenders


def test_only_the_runtime_ends_a_runs_output() -> None:
    """Closing an OutputStream (the run's single terminal) happens in conversation/runtime.py only."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).as_posix() in ("conversation/runtime.py", "conversation/output.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "close":
                target = ast.unparse(node.func.value)
                if "output" in target or "stream" == target:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders


def test_only_the_runtime_changes_a_conversations_phase() -> None:
    """The lifecycle has one writer: `phase` is assigned, and transitions checked, in runtime.py only
    (state.py holds the table; the modules the runtime drives decide or report, never transition)."""
    offenders = []
    for path in (SRC / "conversation").rglob("*.py"):
        if path.name in ("runtime.py", "state.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assigned = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            if any(isinstance(t, ast.Attribute) and t.attr == "phase" for t in assigned):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: assigns .phase")
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("check_transition", "_transition"):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders


def test_conversation_modules_stay_small() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in (SRC / "conversation").rglob("*.py")}
    assert not {name: lines for name, lines in sizes.items() if lines > 500}


def test_only_the_composition_root_opens_the_store_in_a_server() -> None:
    """A running server's store is opened in `server.py` alone (a second backend plugs in there);
    CLI commands are processes of their own and open theirs."""
    offenders = []
    for path in SRC.rglob("*.py"):
        where = path.relative_to(SRC)
        if where.as_posix() == "server.py" or where.parts[0] in ("cli", "store"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Store.open"):
                offenders.append(f"{where}:{node.lineno}")
    assert not offenders


def test_the_gateway_never_writes_state() -> None:
    """The gateway decodes and routes; journaling an append, like every other write, is the
    conversation side's. Outside the composition root it takes nothing from the store but its errors."""
    allowed = {"cursor_byok.store", "cursor_byok.store.StoreError"}
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in imported_modules(p) if n.startswith("cursor_byok.store") and n not in allowed)
        for p in files("gateway") if p.name != "app.py"
    }
    assert not {k: v for k, v in offenders.items() if v}
