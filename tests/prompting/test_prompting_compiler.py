"""The prompt compiler is deterministic, byte-stable and mode-aware."""
from __future__ import annotations

import random

import msgspec
import pytest

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.prompting import (
    FIXED_TOOL_SCHEMAS,
    FIXED_TOOLS,
    McpToolDescriptor,
    Mode,
    NamedText,
    RequestContext,
    RuntimeMessage,
    Selection,
    compaction_prompt,
    compile_request,
    mcp_tool_names,
    render_request_context,
    render_runtime_message,
    tools_for_mode,
)

MODEL = ModelConfig(id="byok-sonnet", provider=ProviderKind.ANTHROPIC, model="claude-x", display_name="My Sonnet")

MCP = [
    McpToolDescriptor("github", "search_issues", "Search issues.",
                      {"type": "object", "required": ["q"],
                       "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}}}),
    McpToolDescriptor("db", "query", "Run SQL.", {"properties": {"sql": {"type": "string"}}, "type": "object"}),
]


def encoded(prompt) -> bytes:
    return msgspec.json.encode(prompt)


def shuffled_schema(value, rng: random.Random):
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: shuffled_schema(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [shuffled_schema(v, rng) for v in value]
    return value


def test_identical_inputs_give_identical_bytes_regardless_of_input_order() -> None:
    baseline = encoded(compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), MCP))
    rng = random.Random(7)
    for _ in range(20):
        names = list(FIXED_TOOLS)
        rng.shuffle(names)
        mcp = [McpToolDescriptor(d.server, d.name, d.description, shuffled_schema(d.input_schema, rng))
               for d in rng.sample(MCP, len(MCP))]
        assert encoded(compile_request("agent", MODEL, names, mcp)) == baseline


def test_fixed_tools_are_sorted_and_mcp_tools_follow_them() -> None:
    compiled = compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), MCP)
    names = [t.name for t in compiled.tools]
    fixed = names[: len(FIXED_TOOLS)]
    assert fixed == sorted(FIXED_TOOLS)
    assert names[len(FIXED_TOOLS):] == ["mcp_db_query", "mcp_github_search_issues"]
    without = compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), [])
    # Adding MCP servers never changes the fixed prefix (or the system prompt).
    assert encoded(without.tools) == encoded(compiled.tools[: len(FIXED_TOOLS)])
    assert without.system == compiled.system
    assert [(r.name, r.server, r.tool) for r in compiled.mcp_routes] == [
        ("mcp_db_query", "db", "query"), ("mcp_github_search_issues", "github", "search_issues")]
    schema = compiled.tools[-1].parameters
    assert list(schema) == sorted(schema) and list(schema["properties"]) == ["limit", "q"]


def test_mode_tool_sets() -> None:
    assert set(tools_for_mode("agent")) == set(FIXED_TOOLS)
    assert tools_for_mode("ask") == sorted(["Read", "Ls", "Glob", "Grep", "ReadLints", "AskQuestion", "SwitchMode", "WebFetch"])
    assert set(tools_for_mode("plan")) == set(tools_for_mode("ask")) | {"CreatePlan", "TodoWrite"}
    assert set(tools_for_mode("subagent")) == set(FIXED_TOOLS) - {"Task", "AwaitSubagent", "AskQuestion", "SwitchMode", "CreatePlan"}


@pytest.mark.parametrize("mode", list(Mode))
def test_compiler_offers_only_what_the_mode_and_tools_layer_allow(mode: Mode) -> None:
    available = ["Read", "Write", "Shell", "Grep", "Task", "CreatePlan", "CallMcpTool"]
    compiled = compile_request(mode, MODEL, available, MCP)
    names = [t.name for t in compiled.tools]
    fixed = [n for n in names if not n.startswith("mcp_")]
    assert fixed == sorted(set(available) & set(tools_for_mode(mode)))
    has_mcp = any(n.startswith("mcp_") for n in names)
    assert has_mcp == (mode in (Mode.AGENT, Mode.SUBAGENT))
    assert f"## Mode: {mode.value}" in compiled.system


def test_unknown_tool_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="GenerateImage"):
        compile_request("agent", MODEL, ["Read", "GenerateImage"])


def test_system_prompt_is_static_apart_from_the_model_name() -> None:
    a = compile_request("agent", MODEL, ["Read"]).system
    other = ModelConfig(id="gpt", provider=ProviderKind.OPENAI_CHAT, model="gpt-x")
    b = compile_request("agent", other, ["Read"]).system
    assert "My Sonnet" in a and "gpt" in b
    assert a.replace("My Sonnet", "gpt") == b
    custom = compile_request("agent", MODEL, ["Read"], custom_system_prompt="  Always answer in French.  ").system
    assert custom.startswith(a) and custom.endswith("## Additional instructions\n\nAlways answer in French.")


def test_tool_argument_names() -> None:
    expected = {
        "Read": ({"path"}, {"offset", "limit"}),
        "Write": ({"path", "contents"}, set()),
        "StrReplace": ({"path", "old_string", "new_string"}, {"replace_all"}),
        "Delete": ({"path"}, set()),
        "Ls": ({"path"}, {"ignore"}),
        "Glob": ({"glob_pattern"}, {"target_directory"}),
        "Grep": ({"pattern"}, {"path", "glob", "output_mode", "case_insensitive", "context_lines", "head_limit"}),
        "Shell": ({"command"}, {"working_directory", "timeout_ms", "description", "run_in_background"}),
        "Await": ({"shell_id"}, {"timeout_ms"}),
        "ReadLints": (set(), {"paths"}),
        "TodoWrite": ({"todos"}, {"merge"}),
        "AskQuestion": ({"questions"}, set()),
        "SwitchMode": ({"target_mode"}, {"explanation"}),
        "CreatePlan": ({"name", "overview", "plan"}, {"todos"}),
        "Task": ({"description", "prompt"}, {"subagent_type", "model", "run_in_background"}),
        "CallMcpTool": ({"server", "toolName", "arguments"}, set()),
        "WebFetch": ({"url"}, set()),
        "AwaitSubagent": ({"agent_id"}, {"timeout_ms"}),
        "WriteShellStdin": ({"shell_id", "chars"}, set()),
        "ListMcpResources": (set(), {"server"}),
        "FetchMcpResource": ({"server", "uri"}, set()),
    }
    assert set(FIXED_TOOL_SCHEMAS) == set(FIXED_TOOLS) == set(expected)
    for name, (required, optional) in expected.items():
        params = FIXED_TOOL_SCHEMAS[name].parameters
        assert params["type"] == "object"
        assert set(params["required"]) == required, name
        assert set(params["properties"]) == required | optional, name
        assert FIXED_TOOL_SCHEMAS[name].description
    grep_modes = FIXED_TOOL_SCHEMAS["Grep"].parameters["properties"]["output_mode"]["enum"]
    assert grep_modes == ["content", "files_with_matches", "count"]
    todo = FIXED_TOOL_SCHEMAS["TodoWrite"].parameters["properties"]["todos"]["items"]
    assert set(todo["properties"]) == {"id", "content", "status"}
    question = FIXED_TOOL_SCHEMAS["AskQuestion"].parameters["properties"]["questions"]["items"]
    assert set(question["properties"]) == {"id", "prompt", "options", "allow_multiple"}
    assert set(question["properties"]["options"]["items"]["properties"]) == {"id", "label"}


def test_mcp_names_are_safe_unique_and_bounded() -> None:
    descriptors = [
        McpToolDescriptor("my server", "get.item"),
        McpToolDescriptor("my_server", "get_item"),  # collides with the first after sanitizing
        McpToolDescriptor("s", "x" * 100),
        McpToolDescriptor("ok-server", "list"),
    ]
    names = mcp_tool_names(descriptors)
    assert names[("ok-server", "list")] == "mcp_ok-server_list"
    assert len(set(names.values())) == 4
    assert all(len(n) <= 64 and n.startswith("mcp_") for n in names.values())
    assert all(all(c.isalnum() or c in "_-" for c in n) for n in names.values())
    assert mcp_tool_names(list(reversed(descriptors))) == names
    compiled = compile_request("agent", MODEL, ["CallMcpTool"], descriptors)
    routes = {r.name: (r.server, r.tool) for r in compiled.mcp_routes}
    assert routes == {v: k for k, v in names.items()}


def test_mcp_schema_is_normalized_to_an_object() -> None:
    compiled = compile_request("agent", MODEL, [], [McpToolDescriptor("s", "t", "", {"type": "string"}),
                                                    McpToolDescriptor("s", "u", "", {})])
    assert [t.parameters for t in compiled.tools] == [{"type": "object", "properties": {}}] * 2
    assert compiled.tools[0].description == "Tool t of MCP server s."


def test_request_context_renders_deterministically() -> None:
    ctx = RequestContext(
        workspace_paths=["/home/u/proj", "/home/u/lib"], os="linux 6.8", shell="bash",
        open_files=["src/b.py", "src/a.py", "src/b.py"], git_branch="main", git_status="M src/a.py",
        rules=[NamedText("style", "Use tabs."), NamedText("api", "Never break the API.")],
        sections=[NamedText("mcp:db", "Read-only database.")],
    )
    text = render_request_context(ctx)
    assert text == render_request_context(msgspec.json.decode(msgspec.json.encode(ctx), type=RequestContext))
    assert text.index("/home/u/proj") < text.index("/home/u/lib")  # primary folder first
    assert text.index("src/a.py") < text.index("src/b.py") and text.count("src/b.py") == 1
    assert text.index('name="api"') < text.index('name="style"')
    reordered = msgspec.structs.replace(ctx, open_files=["src/a.py", "src/b.py"], rules=list(reversed(ctx.rules)))
    assert render_request_context(reordered) == text
    changed = msgspec.structs.replace(ctx, git_status="M src/b.py")
    assert render_request_context(changed) != text
    compiled = compile_request("agent", MODEL, ["Read"], request_context=ctx)
    assert compiled.context_message == text
    assert "Use tabs." not in compiled.system  # context never enters the system prompt
    assert render_request_context(RequestContext()).startswith("<request_context>")


def test_runtime_message() -> None:
    text = render_runtime_message(RuntimeMessage(
        query="Why does this fail?", mode=Mode.ASK, active_file="src/a.py",
        selections=[Selection(path="src/a.py", text="x = 1", start_line=3)], timestamp="2025-01-01T10:00:00Z"))
    assert "Why does this fail?" in text and "ask mode" in text
    assert 'path="src/a.py:3"' in text and "x = 1" in text and "2025-01-01T10:00:00Z" in text
    assert text.rstrip().endswith("</user_query>")


def test_compaction_prompt() -> None:
    prompt = compaction_prompt()
    assert "summary" in prompt.system.lower() and "Next steps" in prompt.instruction


def test_a_prompt_is_compiled_once_and_handed_out_again() -> None:
    """Every run of a conversation asks for the same prompt: it gets the very same objects, which
    is what lets a provider adapter keep their encoded JSON."""
    first = compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), MCP)
    again = compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), list(MCP))
    assert again is first
    other_model = ModelConfig(id="byok-other", provider=ProviderKind.ANTHROPIC, model="claude-x")
    for different in (
        compile_request(Mode.ASK, MODEL, list(FIXED_TOOLS), MCP),
        compile_request(Mode.AGENT, other_model, list(FIXED_TOOLS), MCP),
        compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS)[:-1], MCP),
        compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), MCP[:1]),
        compile_request(Mode.AGENT, MODEL, list(FIXED_TOOLS), MCP, custom_system_prompt="Be brief."),
    ):
        assert encoded(different) != encoded(first)
