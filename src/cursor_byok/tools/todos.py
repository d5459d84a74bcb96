"""TodoWrite: handled on the server; the todo list lives in the conversation, not in the IDE."""
from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from ._wire import pb
from .arguments import Arguments
from .base import ToolExecution
from .context import TODO_STATUSES, TodoEntry
from .steps import Step

__all__ = ["TodoWriteExecution", "todo_item", "parse_todo_objects"]

_STATUS_ENUM = {
    "pending": pb.TODO_STATUS_PENDING,
    "in_progress": pb.TODO_STATUS_IN_PROGRESS,
    "completed": pb.TODO_STATUS_COMPLETED,
    "cancelled": pb.TODO_STATUS_CANCELLED,
}
_STATUS_ALIASES = {"canceled": "cancelled", "in-progress": "in_progress", "done": "completed"}


def todo_item(entry: TodoEntry) -> pb.TodoItem:
    return pb.TodoItem(id=entry.id, content=entry.content, status=_STATUS_ENUM.get(entry.status, pb.TODO_STATUS_UNSPECIFIED))


def _status(value: Any, problems: list[str], where: str) -> str | None:
    if value is None:
        return None
    text = _STATUS_ALIASES.get(str(value).strip().lower(), str(value).strip().lower())
    if text not in TODO_STATUSES:
        problems.append(f"{where}: status must be one of {', '.join(TODO_STATUSES)}")
        return None
    return text


def parse_todo_objects(
    items: list[Any], problems: list[str], *, require_content: bool, argument: str = "todos"
) -> list[tuple[str | None, str | None, str | None]]:
    """(id, content, status) per item; plain strings are accepted as contents."""
    parsed: list[tuple[str | None, str | None, str | None]] = []
    for index, item in enumerate(items):
        where = f"{argument}[{index}]"
        if isinstance(item, str):
            parsed.append((None, item, None))
            continue
        if not isinstance(item, dict):
            problems.append(f"{where} must be an object")
            continue
        raw_id = item.get("id")
        todo_id = str(raw_id) if isinstance(raw_id, (str, int)) and str(raw_id) else None
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            problems.append(f"{where}: content must be a string")
            content = None
        if content is None and require_content:
            problems.append(f"{where}: missing content")
        parsed.append((todo_id, content, _status(item.get("status"), problems, where)))
    return parsed


class TodoWriteExecution(ToolExecution):
    """TodoWrite{todos:[{id, content, status}], merge?}: no exec; completes at once.

    merge=true updates items by id (content/status given) and appends new ids; otherwise the
    list is replaced. The resulting list is `execution.todos` for the runtime to persist.
    """

    tool_name = "TodoWrite"
    variant = "update_todos_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.merge = bool(a.boolean("merge"))
        items = a.raw.get("todos")
        if items is None:
            a.errors.append("missing required argument 'todos'")
            items = []
        elif not isinstance(items, list):
            a.errors.append("argument 'todos' must be a list")
            items = []
        existing = {entry.id for entry in self.ctx.todos} if self.merge else set()
        self._requested: list[TodoEntry] = []
        self._updates: list[tuple[str, str | None, str | None]] = []
        for index, (todo_id, content, status) in enumerate(
            parse_todo_objects(items, a.errors, require_content=not self.merge)
        ):
            if todo_id is None:
                a.errors.append(f"todos[{index}]: missing id")
                continue
            if self.merge and content is None and todo_id not in existing:
                a.errors.append(f"todos[{index}]: missing content for new todo '{todo_id}'")
                continue
            self._updates.append((todo_id, content, status))
            self._requested.append(TodoEntry(id=todo_id, content=content or "", status=status or "pending"))
        self._todos: list[TodoEntry] | None = None

    @property
    def todos(self) -> list[TodoEntry] | None:
        return self._todos

    def _args_pb(self) -> Message:
        return pb.UpdateTodosArgs(todos=[todo_item(entry) for entry in self._requested], merge=self.merge)

    def _error_result(self, message: str) -> Message:
        return pb.UpdateTodosResult(error=pb.UpdateTodosError(error=message))

    def _merged(self) -> list[TodoEntry]:
        if not self.merge:
            return [TodoEntry(id=i, content=c or "", status=s or "pending") for i, c, s in self._updates]
        merged = {entry.id: entry for entry in self.ctx.todos}
        order = [entry.id for entry in self.ctx.todos]
        for todo_id, content, status in self._updates:
            old = merged.get(todo_id)
            if old is None:
                order.append(todo_id)
                merged[todo_id] = TodoEntry(id=todo_id, content=content or "", status=status or "pending")
            else:
                merged[todo_id] = TodoEntry(
                    id=todo_id,
                    content=content if content is not None else old.content,
                    status=status if status is not None else old.status,
                )
        return [merged[todo_id] for todo_id in order]

    def _begin(self) -> Step:
        todos = self._merged()
        self._todos = todos
        counts = {status: sum(1 for t in todos if t.status == status) for status in TODO_STATUSES}
        summary = ", ".join(f"{counts[s]} {s.replace('_', ' ')}" for s in TODO_STATUSES if counts[s])
        lines = [f"Todo list updated ({len(todos)} items{': ' + summary if summary else ''})."]
        lines.extend(f"- [{t.status}] {t.content} (id: {t.id})" for t in todos)
        card = pb.UpdateTodosSuccess(
            todos=[todo_item(t) for t in todos], total_count=len(todos), was_merge=self.merge
        )
        return self._finish("\n".join(lines), is_error=False, result=pb.UpdateTodosResult(success=card))
