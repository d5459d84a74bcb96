from __future__ import annotations

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import TodoEntry, ToolContext, start_tool

from .support import asked, done, reply, request, sent

QUESTIONS = {
    "title": "Setup",
    "questions": [
        {
            "id": "db",
            "prompt": "Which database?",
            "options": [{"id": "pg", "label": "Postgres"}, {"id": "sq", "label": "SQLite"}],
        },
        {
            "id": "extras",
            "prompt": "Extras?",
            "options": [{"id": "a", "label": "Auth"}, {"id": "b", "label": "Billing"}],
            "allow_multiple": True,
        },
    ],
}


def test_ask_question_query_and_answer(ctx):
    execution = start_tool(request("AskQuestion", QUESTIONS), ctx)
    query = asked(execution.first())
    assert query.WhichOneof("query") == "ask_question_interaction_query"
    args = query.ask_question_interaction_query.args
    assert query.ask_question_interaction_query.tool_call_id == "call-1"
    assert args.title == "Setup"
    assert [q.id for q in args.questions] == ["db", "extras"]
    assert args.questions[0].options[1] == pb.AskQuestionArgs.Option(id="sq", label="SQLite")
    assert args.questions[1].allow_multiple is True
    answer = pb.AskQuestionResult(success=pb.AskQuestionSuccess())
    answer.success.answers.add(question_id="db", selected_option_ids=["pg"])
    answer.success.answers.add(question_id="extras", selected_option_ids=["a", "b"], freeform_text="and SSO")
    response = pb.InteractionResponse(
        id=query.id, ask_question_interaction_response=pb.AskQuestionInteractionResponse(result=answer)
    )
    outcome = done(execution.on_interaction_response(response))
    assert outcome.content == (
        "The user answered:\n- Which database?: Postgres\n- Extras?: Auth, Billing, \"and SSO\""
    )
    assert execution.completed().ask_question_tool_call.result == answer


def test_ask_question_rejected_and_invalid(ctx):
    execution = start_tool(request("AskQuestion", QUESTIONS), ctx)
    query = asked(execution.first())
    result = pb.AskQuestionResult(rejected=pb.AskQuestionRejected(reason="busy"))
    response = pb.InteractionResponse(
        id=query.id, ask_question_interaction_response=pb.AskQuestionInteractionResponse(result=result)
    )
    outcome = done(execution.on_interaction_response(response))
    assert outcome.is_error and "busy" in outcome.content
    outcome = done(start_tool(request("AskQuestion", {"questions": [{"id": "q"}]}), ctx).first())
    assert outcome.is_error and "prompt" in outcome.content


def test_switch_mode(ctx):
    execution = start_tool(request("SwitchMode", {"target_mode": "plan", "explanation": "needs design"}), ctx)
    query = asked(execution.first())
    args = query.switch_mode_request_query.args
    assert (args.target_mode_id, args.explanation, args.tool_call_id) == ("plan", "needs design", "call-1")
    response = pb.InteractionResponse(
        id=query.id,
        switch_mode_request_response=pb.SwitchModeRequestResponse(approved=pb.SwitchModeRequestResponse.Approved()),
    )
    outcome = done(execution.on_interaction_response(response))
    assert outcome.content == "Switched to plan mode." and not outcome.is_error
    success = execution.completed().switch_mode_tool_call.result.success
    assert (success.from_mode_id, success.to_mode_id) == ("agent", "plan")


def test_switch_mode_rejected(ctx):
    execution = start_tool(request("SwitchMode", {"target_mode": "ask"}), ctx)
    query = asked(execution.first())
    response = pb.InteractionResponse(
        id=query.id,
        switch_mode_request_response=pb.SwitchModeRequestResponse(
            rejected=pb.SwitchModeRequestResponse.Rejected(reason="stay")
        ),
    )
    outcome = done(execution.on_interaction_response(response))
    assert outcome.is_error and "stay" in outcome.content


def test_create_plan(ctx):
    args = {
        "name": "Refactor",
        "overview": "Split the module",
        "plan": "# Plan\n1. split",
        "todos": [{"id": "t1", "content": "split"}, "test it"],
    }
    execution = start_tool(request("CreatePlan", args), ctx)
    query = asked(execution.first())
    plan = query.create_plan_request_query.args
    assert query.create_plan_request_query.tool_call_id == "call-1"
    assert (plan.name, plan.overview, plan.plan) == ("Refactor", "Split the module", "# Plan\n1. split")
    assert [(t.id, t.content, t.status) for t in plan.todos] == [
        ("t1", "split", pb.TODO_STATUS_PENDING),
        ("todo-2", "test it", pb.TODO_STATUS_PENDING),
    ]
    result = pb.CreatePlanResult(success=pb.CreatePlanSuccess(), plan_uri="file:///plans/refactor.md")
    response = pb.InteractionResponse(
        id=query.id, create_plan_request_response=pb.CreatePlanRequestResponse(result=result)
    )
    outcome = done(execution.on_interaction_response(response))
    assert outcome.content == "Plan 'Refactor' created at file:///plans/refactor.md."


def test_todo_write_completes_without_exec_and_exposes_the_list(ctx):
    execution = start_tool(
        request(
            "TodoWrite",
            {"todos": [{"id": "1", "content": "write code", "status": "in_progress"}, {"id": "2", "content": "test", "status": "pending"}]},
        ),
        ctx,
    )
    outcome = done(execution.first())
    assert not outcome.is_error
    assert outcome.content.startswith("Todo list updated (2 items: 1 pending, 1 in progress).")
    assert execution.todos == [TodoEntry("1", "write code", "in_progress"), TodoEntry("2", "test", "pending")]
    card = execution.completed().update_todos_tool_call
    assert card.result.success.total_count == 2
    assert card.result.success.todos[0].status == pb.TODO_STATUS_IN_PROGRESS


def test_todo_write_merge(clock):
    ctx = ToolContext(todos=[TodoEntry("1", "write code", "in_progress"), TodoEntry("2", "test", "pending")], clock_ms=clock)
    execution = start_tool(
        request("TodoWrite", {"merge": True, "todos": [{"id": "1", "status": "completed"}, {"id": "3", "content": "ship"}]}),
        ctx,
    )
    done(execution.first())
    assert execution.todos == [
        TodoEntry("1", "write code", "completed"),
        TodoEntry("2", "test", "pending"),
        TodoEntry("3", "ship", "pending"),
    ]
    assert execution.completed().update_todos_tool_call.result.success.was_merge


def test_todo_write_invalid_status(ctx):
    outcome = done(start_tool(request("TodoWrite", {"todos": [{"id": "1", "content": "x", "status": "doing"}]}), ctx).first())
    assert outcome.is_error and "status" in outcome.content


def test_task_foreground(ctx):
    execution = start_tool(
        request("Task", {"description": "Explore auth", "prompt": "Find the login code", "subagent_type": "explore"}), ctx
    )
    message = sent(execution.first())
    assert message.WhichOneof("message") == "subagent_args"
    args = message.subagent_args
    assert args.tool_call_id == "call-1"
    assert args.prompt == "Find the login code"
    assert args.model_id == "model-a"
    assert args.subagent_type == "explore"
    assert not args.HasField("run_in_background")
    assert args.parent_conversation_id == "conv-1"
    assert message.accept_hook_additional_contexts is False
    card = execution.started().task_tool_call.args
    assert card.description == "Explore auth" and card.subagent_type.WhichOneof("type") == "explore"
    result = pb.SubagentResult(success=pb.SubagentSuccess(agent_id="agent-42", final_message="login is in auth.py"))
    outcome = done(execution.on_exec_result(reply(message, subagent_result=result)))
    assert outcome.content == "Subagent name: Explore auth\nSubagent ID: agent-42\n\nlogin is in auth.py"
    success = execution.completed().task_tool_call.result.success
    assert success.agent_id == "agent-42" and not success.is_background


def test_task_background_and_model_choice(ctx):
    execution = start_tool(
        request("Task", {"description": "d", "prompt": "p", "model": "model-b", "run_in_background": True}), ctx
    )
    message = sent(execution.first())
    assert message.subagent_args.run_in_background is True
    assert message.subagent_args.model_id == "model-b"
    result = pb.SubagentResult(success=pb.SubagentSuccess(agent_id="bg-1"))
    outcome = done(execution.on_exec_result(reply(message, subagent_result=result)))
    assert "Subagent ID: bg-1" in outcome.content and "background" in outcome.content
    assert execution.completed().task_tool_call.result.success.is_background
    outcome = done(start_tool(request("Task", {"description": "d", "prompt": "p", "model": "gpt-x"}), ctx).first())
    assert outcome.is_error and "unknown model 'gpt-x'" in outcome.content


def test_task_error_result(ctx):
    execution = start_tool(request("Task", {"description": "d", "prompt": "p"}), ctx)
    result = pb.SubagentResult(error=pb.SubagentError(error="child crashed"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), subagent_result=result)))
    assert outcome.is_error and "child crashed" in outcome.content
    assert execution.completed().task_tool_call.result.error.error.endswith("child crashed")
