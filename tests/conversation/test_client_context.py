"""The client's request context, asked for when a run request carries none (pure parts)."""
from __future__ import annotations

from cursor_byok.conversation.client_context import ask, lacks_request_context, with_request_context
from cursor_byok.protocol import agent_pb2 as pb


def user_run(with_context: bool) -> pb.AgentRunRequest:
    rr = pb.AgentRunRequest(conversation_id="c")
    rr.action.user_message_action.user_message.text = "hi"
    if with_context:
        rr.action.user_message_action.request_context.SetInParent()
    return rr


def context() -> pb.RequestContext:
    ctx = pb.RequestContext()
    ctx.env.workspace_paths.append("/work/project")
    ctx.env.terminals_folder = "/work/project/terminals"
    return ctx


def test_only_a_user_message_or_resume_without_a_context_lacks_one() -> None:
    assert lacks_request_context(user_run(False))
    assert not lacks_request_context(user_run(True))
    resume = pb.AgentRunRequest()
    resume.action.resume_action.SetInParent()
    assert lacks_request_context(resume)
    completion = pb.AgentRunRequest()
    completion.action.background_task_completion_action.SetInParent()
    assert not lacks_request_context(completion)


def test_the_answer_completes_a_copy_of_the_request() -> None:
    rr = user_run(False)
    completed = with_request_context(rr, context())
    assert completed.action.user_message_action.request_context.env.workspace_paths == ["/work/project"]
    assert completed.action.user_message_action.user_message.text == "hi"
    assert not rr.action.user_message_action.HasField("request_context")


async def test_the_query_takes_its_own_result_and_the_stream_close_after_it() -> None:
    query, request = ask(7)
    assert request.exec_server_message.id == 7 and request.exec_server_message.HasField("request_context_args")
    other = pb.ExecClientMessage(id=8)
    other.request_context_result.success.request_context.CopyFrom(context())
    assert not query.takes("exec_client_message", other)
    assert not query.takes("exec_client_message", pb.ExecClientMessage(id=7, read_result=pb.ReadResult()))
    mine = pb.ExecClientMessage(id=7)
    mine.request_context_result.success.request_context.CopyFrom(context())
    assert query.takes("exec_client_message", mine)
    assert (await query.answer).env.terminals_folder == "/work/project/terminals"
    close = pb.ExecClientControlMessage()
    close.stream_close.id = 7
    assert query.takes("exec_client_control_message", close)


async def test_an_error_or_a_throw_is_no_context() -> None:
    query, _ = ask(3)
    failed = pb.ExecClientMessage(id=3)
    failed.request_context_result.error.error = "no workspace"
    assert query.takes("exec_client_message", failed)
    assert await query.answer is None
    thrown, _ = ask(4)
    control = pb.ExecClientControlMessage()
    control.throw.id = 4
    assert thrown.takes("exec_client_control_message", control)
    assert await thrown.answer is None


def test_the_contexts_mcp_tools_serve_a_request_that_names_none() -> None:
    ctx = context()
    ctx.tools.add(name="notes-lookup", provider_identifier="notes", tool_name="lookup")
    assert [t.name for t in with_request_context(user_run(False), ctx).mcp_tools.mcp_tools] == ["notes-lookup"]
    own = user_run(False)
    own.mcp_tools.mcp_tools.add(name="weather-get", provider_identifier="weather", tool_name="get")
    assert [t.name for t in with_request_context(own, ctx).mcp_tools.mcp_tools] == ["weather-get"]
