"""Reading what a newer Cursor sends: enum names, oneof members, unknown fields; each kind logged once."""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from cursor_byok.protocol import agent_pb2 as pb, compat, enum_name, unknown_fields, which
from tests.harness.newer import NEWER_ENUM_VALUE, add_newer_field, add_newer_member

LOGGER = "cursor_byok.protocol.compat"


@pytest.fixture(autouse=True)
def fresh_notices(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Each test starts with no kind noticed yet (the set is per process) and captures INFO."""
    saved = set(compat._noticed)
    compat._noticed.clear()
    caplog.set_level(logging.INFO, LOGGER)
    yield
    compat._noticed.clear()
    compat._noticed.update(saved)


def notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.unknown for r in caplog.records if r.name == LOGGER]  # type: ignore[attr-defined]


def test_enum_name_names_a_known_value_and_calls_a_newer_one_unknown(caplog: pytest.LogCaptureFixture) -> None:
    assert enum_name(pb.BackgroundTaskKind, pb.BACKGROUND_TASK_KIND_SHELL) == "BACKGROUND_TASK_KIND_SHELL"
    assert enum_name(pb.BackgroundTaskKind, NEWER_ENUM_VALUE) == "unknown(99)"
    assert enum_name(pb.BackgroundTaskKind, NEWER_ENUM_VALUE) == "unknown(99)"
    assert enum_name(pb.BackgroundTaskKind, 100) == "unknown(100)"
    assert notices(caplog) == ["agent.v1.BackgroundTaskKind=99", "agent.v1.BackgroundTaskKind=100"]
    assert all(r.levelno == logging.INFO for r in caplog.records)


def test_which_gives_none_for_an_empty_or_newer_oneof_and_reports_only_the_newer(caplog: pytest.LogCaptureFixture) -> None:
    result = pb.ReadResult()
    assert which(result, "result") is None  # empty: nothing to report
    result.file_not_found.SetInParent()
    assert which(result, "result") == "file_not_found"
    assert notices(caplog) == []

    newer = pb.ReadResult.FromString(result.SerializeToString())
    add_newer_member(newer, "result")
    assert which(newer, "result") is None
    assert which(pb.ReadResult.FromString(newer.SerializeToString()), "result") is None
    assert notices(caplog) == ["agent.v1.ReadResult.result"]


def test_which_sees_a_newer_member_of_a_nested_message(caplog: pytest.LogCaptureFixture) -> None:
    msg = pb.AgentClientMessage()
    msg.exec_client_message.id = 4
    msg.exec_client_message.read_result.success.content = "x"
    add_newer_member(msg.exec_client_message.read_result, "result")
    parsed = pb.AgentClientMessage.FromString(msg.SerializeToString())
    assert which(parsed, "message") == "exec_client_message"
    assert which(parsed.exec_client_message, "message") == "read_result"
    assert which(parsed.exec_client_message.read_result, "result") is None
    assert notices(caplog) == ["agent.v1.ReadResult.result"]


def test_unknown_fields_looks_down_to_its_depth_through_first_elements(caplog: pytest.LogCaptureFixture) -> None:
    rr = pb.AgentRunRequest()
    top = add_newer_field(rr)
    completion = rr.action.background_task_completion_action.completions.add(task_id="t")
    deep = add_newer_field(completion)
    rr.action.background_task_completion_action.completions.add(task_id="second")  # only the first is looked at
    parsed = pb.AgentRunRequest.FromString(rr.SerializeToString())

    assert unknown_fields(parsed, depth=1) == [f"agent.v1.AgentRunRequest#{top}"]
    assert unknown_fields(parsed, depth=3) == [f"agent.v1.AgentRunRequest#{top}"]
    assert unknown_fields(parsed, depth=4) == [f"agent.v1.AgentRunRequest#{top}", f"agent.v1.BackgroundTaskCompletion#{deep}"]
    assert notices(caplog) == [f"agent.v1.AgentRunRequest#{top}", f"agent.v1.BackgroundTaskCompletion#{deep}"]
    assert unknown_fields(pb.AgentRunRequest(), depth=6) == []


def test_unknown_fields_finds_a_newer_field_that_only_a_nested_message_holds(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing newer at the top, one field four levels down: still found (and nothing when none is
    there at all), however the scan decides there is something to look for."""
    rr = pb.AgentRunRequest(conversation_id="c")
    completion = rr.action.background_task_completion_action.completions.add(task_id="t")
    deep = add_newer_field(completion)
    parsed = pb.AgentRunRequest.FromString(rr.SerializeToString())
    assert unknown_fields(parsed, depth=3) == []
    assert unknown_fields(parsed, depth=4) == [f"agent.v1.BackgroundTaskCompletion#{deep}"]
    assert notices(caplog) == [f"agent.v1.BackgroundTaskCompletion#{deep}"]
    plain = pb.AgentRunRequest.FromString(pb.AgentRunRequest(conversation_id="c", action=parsed.action).SerializeToString())
    assert unknown_fields(plain, depth=6) == [f"agent.v1.BackgroundTaskCompletion#{deep}"]  # carried by the copied action
    assert unknown_fields(pb.AgentRunRequest(conversation_id="c"), depth=6) == []


def test_unknown_values_survive_a_copy_and_serialization() -> None:
    completion = pb.BackgroundTaskCompletion(task_id="t", kind=NEWER_ENUM_VALUE)
    number = add_newer_field(completion)
    copy = pb.BackgroundTaskCompletion()
    copy.CopyFrom(pb.BackgroundTaskCompletion.FromString(completion.SerializeToString()))
    assert copy.kind == NEWER_ENUM_VALUE
    assert copy.SerializeToString() == completion.SerializeToString()
    assert f"agent.v1.BackgroundTaskCompletion#{number}" in unknown_fields(copy, depth=1)


def test_a_client_spraying_new_values_is_remembered_only_up_to_a_bound(caplog: pytest.LogCaptureFixture) -> None:
    for value in range(1000, 1000 + compat._MAX_NOTICED + 50):
        assert enum_name(pb.BackgroundTaskStatus, value) == f"unknown({value})"
    assert len(compat._noticed) == compat._MAX_NOTICED
    assert len(notices(caplog)) == compat._MAX_NOTICED


def test_unknown_fields_given_the_wire_bytes_reports_what_the_walk_reports(caplog: pytest.LogCaptureFixture) -> None:
    """With the client message's bytes the scan reads those first (no copy of the request when
    nothing is newer); what it reports is the same, clean or not, at every depth."""
    clean = pb.AgentClientMessage()
    clean.run_request.conversation_id = "c"
    clean.run_request.action.user_message_action.user_message.text = "hello " * 2000
    assert unknown_fields(clean.run_request, 3, wire=clean.SerializeToString()) == []

    rr = pb.AgentRunRequest(conversation_id="c")
    top = add_newer_field(rr)
    completion = rr.action.background_task_completion_action.completions.add(task_id="t")
    deep = add_newer_field(completion)
    msg = pb.AgentClientMessage.FromString(pb.AgentClientMessage(run_request=rr).SerializeToString())
    raw = msg.SerializeToString()
    for depth in (1, 3, 4):
        assert unknown_fields(msg.run_request, depth, wire=raw) == unknown_fields(msg.run_request, depth)
    assert unknown_fields(msg.run_request, 4, wire=raw) == [f"agent.v1.AgentRunRequest#{top}", f"agent.v1.BackgroundTaskCompletion#{deep}"]
    assert notices(caplog) == [f"agent.v1.AgentRunRequest#{top}", f"agent.v1.BackgroundTaskCompletion#{deep}"]
