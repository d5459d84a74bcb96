"""JSON schemas and descriptions of the fixed model-facing tools (our own wording)."""
from __future__ import annotations

from typing import Any

from ..providers import ToolSchema


def canonical(value: Any) -> Any:
    """A copy with every mapping's keys sorted, so encoding never depends on insertion order."""
    if isinstance(value, dict):
        return {str(k): canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _i(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def _b(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_TASK_ITEM_STATUSES = ["pending", "in_progress", "completed", "cancelled"]

_DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "Read": (
        "Read a text file and return its lines, each prefixed with its 1-based line number. Reads the "
        "whole file unless offset/limit select a window; use them for very large files. Images are "
        "returned as images.",
        _obj({
            "path": _s("Path of the file, absolute or relative to the workspace."),
            "offset": _i("1-based line number to start reading at."),
            "limit": _i("Maximum number of lines to return."),
        }, ["path"]),
    ),
    "Write": (
        "Create a file, or replace an existing file's entire contents. Parent directories are created "
        "as needed. For changes to part of an existing file, use StrReplace instead.",
        _obj({
            "path": _s("Path of the file to write."),
            "contents": _s("The complete new contents of the file."),
        }, ["path", "contents"]),
    ),
    "StrReplace": (
        "Replace text in an existing file. `old_string` must match the file exactly, including "
        "whitespace and indentation, and must occur exactly once unless `replace_all` is true. Read the "
        "file first and include enough surrounding lines to make the match unique.",
        _obj({
            "path": _s("Path of the file to edit."),
            "old_string": _s("The exact text to replace."),
            "new_string": _s("The replacement text; must differ from old_string."),
            "replace_all": _b("Replace every occurrence instead of exactly one. Default false."),
        }, ["path", "old_string", "new_string"]),
    ),
    "Delete": (
        "Delete a file. Fails if the path does not exist or is a directory.",
        _obj({"path": _s("Path of the file to delete.")}, ["path"]),
    ),
    "Ls": (
        "List the files and subdirectories of a directory, as a tree limited in depth.",
        _obj({
            "path": _s("Directory to list."),
            "ignore": {"type": "array", "items": {"type": "string"},
                       "description": "Glob patterns of entries to leave out."},
        }, ["path"]),
    ),
    "Glob": (
        "Find files whose paths match a glob pattern such as `**/*.py` or `src/**/test_*.ts`, most "
        "recently modified first.",
        _obj({
            "glob_pattern": _s("The glob pattern to match."),
            "target_directory": _s("Directory to search in. Default: the workspace."),
        }, ["glob_pattern"]),
    ),
    "Grep": (
        "Search file contents with a regular expression (ripgrep syntax). Respects ignore files. "
        "Prefer this over running grep or rg through Shell.",
        _obj({
            "pattern": _s("Regular expression to search for."),
            "path": _s("File or directory to search. Default: the workspace."),
            "glob": _s("Only search files matching this glob, e.g. `*.rs`."),
            "output_mode": _s(
                "`content` shows matching lines, `files_with_matches` only paths (default), `count` "
                "match counts per file.",
                enum=["content", "files_with_matches", "count"],
            ),
            "case_insensitive": _b("Ignore case. Default false."),
            "context_lines": _i("Lines of context before and after each match (content mode)."),
            "head_limit": _i("Return at most this many lines or entries."),
        }, ["pattern"]),
    ),
    "Shell": (
        "Run a command in the user's shell and return its output and exit code. Commands that "
        "outlast `timeout_ms` keep running in the background and return a shell id; use Await to "
        "wait for them. Avoid interactive commands; pass non-interactive flags where needed.",
        _obj({
            "command": _s("The command line to run."),
            "working_directory": _s("Directory to run in. Default: the workspace."),
            "timeout_ms": _i("How long to wait before moving the command to the background."),
            "description": _s("A few words saying what the command does, shown to the user."),
            "run_in_background": _b("Start it in the background at once (a server, a watcher, a command "
                                    "waiting for input) and return its shell id. Default false."),
        }, ["command"]),
    ),
    "Await": (
        "Wait for a background shell command to produce more output or to finish, and return what it "
        "printed since the last look.",
        _obj({
            "shell_id": _s("The shell id returned by Shell."),
            "timeout_ms": _i("Maximum time to wait."),
        }, ["shell_id"]),
    ),
    "AwaitSubagent": (
        "Wait for a subagent started with Task and run_in_background to finish, and return its final "
        "message. Without waiting you are told when it finishes anyway.",
        _obj({
            "agent_id": _s("The subagent ID returned by Task."),
            "timeout_ms": _i("Maximum time to wait."),
        }, ["agent_id"]),
    ),
    "WriteShellStdin": (
        "Type characters into the standard input of a command that runs in the background (its shell "
        "id from Shell), e.g. an answer to a prompt; include \\n to press Enter. Read what it prints "
        "next with Await.",
        _obj({
            "shell_id": _i("The shell id returned by Shell."),
            "chars": _s("The characters to type."),
        }, ["shell_id", "chars"]),
    ),
    "WebFetch": (
        "Fetch a web page (http or https URL) and return its content as text, for documentation or "
        "references the user points to. The user's machine does the request.",
        _obj({"url": _s("The URL to fetch.")}, ["url"]),
    ),
    "ReadLints": (
        "Return the editor's current diagnostics (lint and type errors) for the given files or "
        "directories, or for the whole workspace when no paths are given.",
        _obj({"paths": {"type": "array", "items": {"type": "string"},
                        "description": "Files or directories to report on."}}, []),
    ),
    "TodoWrite": (
        "Maintain the visible todo list of the current task. Send the whole list, or with `merge` only "
        "the items that changed (matched by id). Keep exactly one item in_progress while working.",
        _obj({
            "todos": {"type": "array", "description": "Todo items.", "items": _obj({
                "id": _s("Stable identifier of the item."),
                "content": _s("What needs to be done."),
                "status": _s("Item state.", enum=_TASK_ITEM_STATUSES),
            }, ["id", "content", "status"])},
            "merge": _b("Update only the listed items instead of replacing the list. Default false."),
        }, ["todos"]),
    ),
    "AskQuestion": (
        "Ask the user one or more multiple-choice questions and wait for the answers. Use it when a "
        "decision is theirs to make and changes what you will do.",
        _obj({
            "questions": {"type": "array", "description": "Questions to ask.", "items": _obj({
                "id": _s("Identifier of the question."),
                "prompt": _s("The question text."),
                "options": {"type": "array", "description": "Possible answers.", "items": _obj({
                    "id": _s("Identifier of the option."),
                    "label": _s("Text shown for the option."),
                }, ["id", "label"])},
                "allow_multiple": _b("Whether several options may be chosen. Default false."),
            }, ["id", "prompt", "options"])},
        }, ["questions"]),
    ),
    "SwitchMode": (
        "Ask to switch the conversation to another mode, e.g. to agent mode when the user wants changes "
        "made. The user confirms the switch.",
        _obj({
            "target_mode": _s("The mode to switch to.", enum=["agent", "ask", "plan"]),
            "explanation": _s("Why the switch helps, shown to the user."),
        }, ["target_mode"]),
    ),
    "CreatePlan": (
        "Present an implementation plan for the user to review and approve.",
        _obj({
            "name": _s("Short title of the plan."),
            "overview": _s("One or two sentences on what the plan achieves."),
            "plan": _s("The full plan in Markdown."),
            "todos": {"type": "array", "description": "Concrete steps.", "items": _obj({
                "id": _s("Identifier of the step."),
                "content": _s("What the step does."),
            }, ["id", "content"])},
        }, ["name", "overview", "plan"]),
    ),
    "Task": (
        "Start a subagent that works on a self-contained task with its own context and reports back. "
        "Give it a complete prompt: it cannot see this conversation. Several Task calls in one response "
        "run in parallel.",
        _obj({
            "description": _s("A short (3-5 word) label for the task."),
            "prompt": _s("Everything the subagent needs to know to do the task."),
            "subagent_type": _s("Kind of subagent to use, when the workspace defines several."),
            "model": _s("Model for the subagent. Default: the current model."),
            "run_in_background": _b("Return immediately and deliver the result later. Default false."),
        }, ["description", "prompt"]),
    ),
    "ListMcpResources": (
        "List the resources (files, documents, data) the connected MCP servers offer, with their URIs.",
        _obj({"server": _s("Only this MCP server's resources. Default: every server's.")}, []),
    ),
    "FetchMcpResource": (
        "Read one resource of a connected MCP server by its URI (see ListMcpResources).",
        _obj({
            "server": _s("Name of the MCP server."),
            "uri": _s("URI of the resource."),
        }, ["server", "uri"]),
    ),
    "CallMcpTool": (
        "Call a tool of a connected MCP server by server and tool name.",
        _obj({
            "server": _s("Name of the MCP server."),
            "toolName": _s("Name of the tool on that server."),
            "arguments": {"type": "object", "description": "Arguments for the tool."},
        }, ["server", "toolName", "arguments"]),
    ),
}

FIXED_TOOL_SCHEMAS: dict[str, ToolSchema] = {
    name: ToolSchema(name=name, description=description, parameters=canonical(parameters))
    for name, (description, parameters) in sorted(_DEFINITIONS.items())
}
