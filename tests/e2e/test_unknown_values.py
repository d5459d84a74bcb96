"""The unknown-value sweep: every oneof the server switches on and every wire enum it reads gets a
value newer than our schema, one turn each, through the real server.

A newer member of a oneof is its parent with the oneof cleared and a field number the schema lacks
encoded in raw protobuf bytes; a newer enum value is an out-of-range int (proto3 enums are open).
Each turn must complete, or refuse the input visibly with a specific code (never `internal`), the
server must log the unknown once at INFO where it switched on it, and break no invariant.

The coverage list is derived from the code: an AST scan finds every `which(message, "oneof")` and
`enum_name(Enum, value)` call in src/, each call site must name what it reads in SWITCHES, and each
target there must have a case in `newer_cases.py`. A switch added without one fails
`test_every_switch_is_swept`.
"""
from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pool

import cursor_byok
from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2, side_pb2
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ServerProcess

from .conftest import MODEL
from .newer_cases import CASES, SWITCHES, VALUE_READS, Case, logged_kind, model_calls

SRC = Path(cursor_byok.__file__).parent


# -- the scripted IDE, and the answers it gives ----------------------------------------------------------------
class SweepIDE(ScriptedIDE):
    """Sends the case's altered message the first time it is about to send a client message of the
    case's kind that the case applies to."""

    def __init__(self, base_url: str, workspace: Path, case: Case) -> None:
        super().__init__(base_url, workspace)
        self.case = case
        self.altered = False

    async def append(self, request_id: str, message: pb.AgentClientMessage, **kw: object) -> httpx.Response:  # type: ignore[override]
        if not self.altered and message.WhichOneof("message") == self.case.on:
            altered = self.case.alter(message)
            if altered is not None:
                self.altered = True
                reply = await super().append(request_id, altered, **kw)  # type: ignore[arg-type]
                if self.case.on == "run_request":
                    return reply
        return await super().append(request_id, message, **kw)  # type: ignore[arg-type]


def _answers(ide: ScriptedIDE) -> None:
    def ask(q: pb.InteractionQuery) -> pb.InteractionResponse:
        resp = pb.InteractionResponse()
        resp.ask_question_interaction_response.result.success.answers.add(question_id="q1", selected_option_ids=["a"])
        return resp

    def switch(_: pb.InteractionQuery) -> pb.InteractionResponse:
        resp = pb.InteractionResponse()
        resp.switch_mode_request_response.approved.SetInParent()
        return resp

    def plan(_: pb.InteractionQuery) -> pb.InteractionResponse:
        resp = pb.InteractionResponse()
        resp.create_plan_request_response.result.success.SetInParent()
        return resp

    ide.answers.update(ask_question_interaction_query=ask, switch_mode_request_query=switch, create_plan_request_query=plan)
    ide.mcp_servers = {"weather": {"get_forecast": lambda args: f"sunny in {args['city']}"}}


def _request(workspace: Path, terminals: Path) -> pb.AgentClientMessage:
    msg = run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace))
    rr = msg.run_request
    rr.action.user_message_action.request_context.env.terminals_folder = str(terminals)
    tool = rr.mcp_tools.mcp_tools.add(name="weather-get_forecast", provider_identifier="weather", tool_name="get_forecast")
    tool.input_schema_json = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}})
    return msg


@pytest_asyncio.fixture
async def sweep(request: pytest.FixtureRequest, server: ServerProcess, workspace: Path):  # type: ignore[no-untyped-def]
    ide = SweepIDE(server.base_url, workspace, request.param)
    ide.terminals = workspace / "terminals"
    ide.terminals.mkdir()
    _answers(ide)
    try:
        yield ide
    finally:
        await ide.close()


@pytest.mark.parametrize("sweep", CASES, ids=[c.id for c in CASES], indirect=True)
async def test_a_newer_value_never_fails_the_turn(sweep: SweepIDE, server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    case = sweep.case
    (workspace / "a.txt").write_text("a\n")
    calls = model_calls(case, workspace)
    provider.enqueue(*([OPENAI_CHAT.tool_calls(calls)] if calls else []), OPENAI_CHAT.text(["done"]))
    log_before = len(server.log_path.read_bytes())

    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(sweep.stream(rid, log))
    reply = await sweep.append(rid, _request(workspace, sweep.terminals))
    if reply.status_code != 200:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        assert reply.json()["code"] == case.refused, reply.text  # refused visibly, with its own code
    else:
        await asyncio.wait_for(reader, 20)
        assert log.terminals == 1
        if log.terminal is not None:
            assert log.terminal.code == case.refused, log.terminal
        else:
            assert log.text == "done"

    assert sweep.altered, f"the case never applied: no {case.on} with {case.path or 'a message'}"
    new_log = server.log_path.read_bytes()[log_before:].decode(errors="replace")
    broken = [line for line in new_log.splitlines() if any(m in line for m in ServerProcess.INVARIANT_ERRORS)]
    assert not broken and "Traceback" not in new_log, new_log
    kind = logged_kind(case)
    if kind is not None:
        assert f"unknown={kind}" in server.log_path.read_text(errors="replace"), f"{kind} was never reported"


async def test_each_kind_of_unknown_is_logged_once(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    case = next(c for c in CASES if c.target == "agent.v1.ExecClientMessage.message")
    (workspace / "a.txt").write_text("a\n")
    for _ in range(2):
        ide = SweepIDE(server.base_url, workspace, case)
        try:
            provider.enqueue(OPENAI_CHAT.tool_calls(model_calls(case, workspace)), OPENAI_CHAT.text(["done"]))
            log = await ide.turn(run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
            assert ide.altered and log.text == "done" and log.terminal is None
        finally:
            await ide.close()
    assert server.log_path.read_text(errors="replace").count("unknown=agent.v1.ExecClientMessage.message") == 1


# -- coverage: the switches in the code against the cases ---------------------------------------------------------
def _enum_names() -> set[str]:
    """The simple names of every wire enum (nested ones too): `X.Name(v)` on one of these is a hazard."""
    names: set[str] = set()
    for module in (pb, aiserver_pb2, side_pb2):
        pending = list(module.DESCRIPTOR.message_types_by_name.values())
        names.update(module.DESCRIPTOR.enum_types_by_name)
        while pending:
            message = pending.pop()
            names.update(e.name for e in message.enum_types)
            pending.extend(message.nested_types)
    return names


WIRE_ENUMS = _enum_names()


@dataclass
class _Sites(ast.NodeVisitor):
    module: str
    found: dict[tuple[str, str, str], int] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    attributes: set[str] = field(default_factory=set)
    _scope: list[str] = field(default_factory=list)

    def _nested(self, node: ast.AST, name: str) -> None:
        self._scope.append(name)
        self.generic_visit(node)
        self._scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._nested(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._nested(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attributes.add(node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        where = f"{self.module}:{node.lineno}"
        if isinstance(func, ast.Name) and func.id in ("which", "enum_name"):
            arg = node.args[1] if func.id == "which" else node.args[0]
            if func.id == "which":
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), f"{where}: which() needs a literal oneof name"
                what = arg.value
            else:
                assert isinstance(arg, ast.Attribute), f"{where}: enum_name() needs the enum type as pb.<Enum>"
                what = arg.attr
            key = (self.module, ".".join(self._scope), what)
            self.found[key] = self.found.get(key, 0) + 1
        elif isinstance(func, ast.Attribute) and func.attr == "WhichOneof":
            self.raw.append(f"{where}: WhichOneof (use protocol.which)")
        elif isinstance(func, ast.Attribute) and func.attr in ("Name", "Value") and _last_name(func.value) in WIRE_ENUMS:
            self.raw.append(f"{where}: {func.attr}() on a wire enum (use protocol.enum_name)")
        elif isinstance(func, ast.Attribute) and func.attr in ("which", "enum_name") and _last_name(func.value) != "shutil":
            self.raw.append(f"{where}: call {func.attr}() by its bare name, so this scan sees the switch")
        self.generic_visit(node)


def _last_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def scan_sources() -> _Sites:
    sites = _Sites("")
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module.startswith("protocol/pb/") or module == "protocol/compat.py":
            continue
        sites.module = module
        sites.visit(ast.parse(path.read_text(), module))
    return sites


def test_every_switch_is_swept() -> None:
    sites = scan_sources()
    assert not sites.raw, "wire oneofs and enum names are read through protocol.which / enum_name:\n" + "\n".join(sites.raw)
    missing = sorted(set(sites.found) - set(SWITCHES))
    assert not missing, f"switches with no entry in SWITCHES (name what they read and give it a case): {missing}"
    stale = sorted(set(SWITCHES) - set(sites.found))
    assert not stale, f"SWITCHES names switches the code no longer has: {stale}"
    swept = {c.target for c in CASES}
    unswept = sorted({t for targets in SWITCHES.values() for t in targets} - swept)
    assert not unswept, f"read by the code, never given a newer value: {unswept}"
    assert set(VALUE_READS) <= swept
    unread = [target for target in VALUE_READS if target.rpartition(".")[2] not in sites.attributes]
    assert not unread, f"VALUE_READS names fields the code no longer reads: {unread}"


def test_every_target_is_a_real_oneof_or_enum() -> None:
    pool = descriptor_pool.Default()
    for case in CASES:
        owner, _, name = case.target.rpartition(".")
        descriptor = pool.FindMessageTypeByName(owner)
        f = descriptor.fields_by_name.get(name)
        assert name in descriptor.oneofs_by_name or (f is not None and f.enum_type is not None), case.target
    for (_, _, what), targets in SWITCHES.items():
        for target in targets:
            owner, _, name = target.rpartition(".")
            descriptor = pool.FindMessageTypeByName(owner)
            if name in descriptor.oneofs_by_name:
                assert name == what, (target, what)
            else:
                assert descriptor.fields_by_name[name].enum_type.name == what, (target, what)
