"""AskQuestion, SwitchMode, CreatePlan: interaction queries answered by the user in the IDE."""
from __future__ import annotations

from google.protobuf.message import Message

from ._wire import pb, which
from .arguments import Arguments
from .base import ToolExecution
from .context import TodoEntry
from .steps import Step
from .todos import parse_todo_objects, todo_item

__all__ = ["AskQuestionExecution", "SwitchModeExecution", "CreatePlanExecution"]


class AskQuestionExecution(ToolExecution):
    """AskQuestion → interaction_query.ask_question_interaction_query (3)."""

    tool_name = "AskQuestion"
    variant = "ask_question_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.title = a.string("title") or ""
        self.questions: list[pb.AskQuestionArgs.Question] = []
        raw_questions = a.objects("questions", required=True)
        if "questions" in a.raw and not raw_questions and not a.errors:
            a.errors.append("argument 'questions' must not be empty")
        for index, raw in enumerate(raw_questions):
            where = f"questions[{index}]"
            question = pb.AskQuestionArgs.Question()
            qid, prompt = raw.get("id"), raw.get("prompt")
            if not isinstance(qid, (str, int)) or str(qid) == "":
                a.errors.append(f"{where}: missing id")
            else:
                question.id = str(qid)
            if not isinstance(prompt, str) or not prompt.strip():
                a.errors.append(f"{where}: missing prompt")
            else:
                question.prompt = prompt
            options = raw.get("options")
            if not isinstance(options, list) or not options:
                a.errors.append(f"{where}: options must be a non-empty list")
                options = []
            for option_index, option in enumerate(options):
                if not isinstance(option, dict) or not isinstance(option.get("label"), str):
                    a.errors.append(f"{where}.options[{option_index}]: needs an id and a label")
                    continue
                option_id = option.get("id")
                question.options.add(
                    id=str(option_id) if isinstance(option_id, (str, int)) else str(option_index),
                    label=option["label"],
                )
            allow_multiple = raw.get("allow_multiple")
            if allow_multiple is not None and not isinstance(allow_multiple, bool):
                a.errors.append(f"{where}: allow_multiple must be a boolean")
            question.allow_multiple = bool(allow_multiple)
            self.questions.append(question)

    def _args_pb(self) -> Message:
        return pb.AskQuestionArgs(title=self.title, questions=self.questions)

    def _begin(self) -> Step:
        query = pb.AskQuestionInteractionQuery(args=self._args_pb(), tool_call_id=self.call_id)
        return self._query("ask_question_interaction_query", query, expect="ask_question_interaction_response")

    def _error_result(self, message: str) -> Message:
        return pb.AskQuestionResult(error=pb.AskQuestionError(error_message=message))

    def _on_interaction(self, kind: str, response: pb.AskQuestionInteractionResponse) -> Step:
        result = response.result
        variant = which(result, "result")
        if variant == "success":
            answers = {answer.question_id: answer for answer in result.success.answers}
            lines = ["The user answered:"]
            for question in self.questions:
                labels = {option.id: option.label for option in question.options}
                answer = answers.get(question.id)
                parts: list[str] = []
                if answer is not None:
                    parts.extend(labels.get(option_id, option_id) for option_id in answer.selected_option_ids)
                    if answer.freeform_text:
                        parts.append(f'"{answer.freeform_text}"')
                lines.append(f"- {question.prompt}: {', '.join(parts) if parts else '(no answer)'}")
            return self._finish("\n".join(lines), is_error=False, result=result)
        if variant == "async":
            return self._finish(
                "The questions were shown to the user, who will answer later; continue without the answers.",
                is_error=False,
                result=result,
            )
        if variant == "rejected":
            reason = result.rejected.reason or "no reason given"
            return self._finish(f"The user declined to answer: {reason}", is_error=True, result=result)
        if variant == "error":
            return self._finish(f"Asking the user failed: {result.error.error_message}", is_error=True, result=result)
        return self._fail("AskQuestion returned no result")


class SwitchModeExecution(ToolExecution):
    """SwitchMode → interaction_query.switch_mode_request_query (4); approved or rejected."""

    tool_name = "SwitchMode"
    variant = "switch_mode_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.target_mode = a.string("target_mode", required=True, non_empty=True) or ""
        self.explanation = a.string("explanation")

    def _args_pb(self) -> Message:
        args = pb.SwitchModeArgs(target_mode_id=self.target_mode, tool_call_id=self.call_id)
        if self.explanation is not None:
            args.explanation = self.explanation
        return args

    def _begin(self) -> Step:
        query = pb.SwitchModeRequestQuery(args=self._args_pb())
        return self._query("switch_mode_request_query", query, expect="switch_mode_request_response")

    def _error_result(self, message: str) -> Message:
        return pb.SwitchModeResult(error=pb.SwitchModeError(error=message))

    def _on_interaction(self, kind: str, response: pb.SwitchModeRequestResponse) -> Step:
        variant = which(response, "result")
        if variant == "approved":
            card = pb.SwitchModeResult(
                success=pb.SwitchModeSuccess(from_mode_id=self.ctx.mode, to_mode_id=self.target_mode)
            )
            return self._finish(f"Switched to {self.target_mode} mode.", is_error=False, result=card)
        if variant == "rejected":
            reason = response.rejected.reason or "no reason given"
            card = pb.SwitchModeResult(rejected=pb.SwitchModeRejected(reason=response.rejected.reason))
            return self._finish(
                f"The user declined to switch to {self.target_mode} mode: {reason}", is_error=True, result=card
            )
        return self._fail("SwitchMode returned no result")


class CreatePlanExecution(ToolExecution):
    """CreatePlan → interaction_query.create_plan_request_query (7)."""

    tool_name = "CreatePlan"
    variant = "create_plan_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.plan_name = a.string("name", required=True, non_empty=True) or ""
        self.overview = a.string("overview", required=True) or ""
        self.plan = a.string("plan", required=True, non_empty=True) or ""
        raw = a.raw.get("todos")
        if raw is not None and not isinstance(raw, list):
            a.errors.append("argument 'todos' must be a list")
            raw = []
        self.todos_entries: list[TodoEntry] = []
        for index, (todo_id, content, status) in enumerate(parse_todo_objects(raw or [], a.errors, require_content=True)):
            self.todos_entries.append(
                TodoEntry(id=todo_id or f"todo-{index + 1}", content=content or "", status=status or "pending")
            )

    def _args_pb(self) -> Message:
        return pb.CreatePlanArgs(
            plan=self.plan,
            overview=self.overview,
            name=self.plan_name,
            todos=[todo_item(entry) for entry in self.todos_entries],
        )

    def _begin(self) -> Step:
        query = pb.CreatePlanRequestQuery(args=self._args_pb(), tool_call_id=self.call_id)
        return self._query("create_plan_request_query", query, expect="create_plan_request_response")

    def _error_result(self, message: str) -> Message:
        return pb.CreatePlanResult(error=pb.CreatePlanError(error=message))

    def _on_interaction(self, kind: str, response: pb.CreatePlanRequestResponse) -> Step:
        result = response.result
        variant = which(result, "result")
        if variant == "success":
            where = f" at {result.plan_uri}" if result.plan_uri else ""
            return self._finish(f"Plan '{self.plan_name}' created{where}.", is_error=False, result=result)
        if variant == "error":
            return self._finish(f"Creating the plan failed: {result.error.error}", is_error=True, result=result)
        return self._fail("CreatePlan returned no result")
