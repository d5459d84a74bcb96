from __future__ import annotations

import json

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import ArgsStream, completed_update, partial_args_updates, start_tool, started_update

from .support import done, reply, request, sent


def _edit_events(updates):
    out = []
    for update in updates:
        kind = update.WhichOneof("message")
        if kind == "partial_tool_call":
            out.append(("path", update.partial_tool_call.tool_call.edit_tool_call.args.path))
        else:
            out.append(("content", update.tool_call_delta.tool_call_delta.edit_tool_call_delta.stream_content_delta))
    return out


def _feed_in_chunks(stream: ArgsStream, text: str, size: int):
    updates = []
    for start in range(0, len(text), size):
        updates.extend(stream.feed(text[start : start + size]))
    return updates


def test_opened_placeholder(ctx):
    stream = ArgsStream("c1", "Read", "m1")
    [update] = stream.opened()
    partial = update.partial_tool_call
    assert (partial.call_id, partial.args_text_delta, partial.model_call_id) == ("c1", "", "m1")
    assert partial.tool_call.WhichOneof("tool") == "read_tool_call"
    assert partial.tool_call.tool_call_id == "c1"
    assert ArgsStream("c1", "Unheard", "m1").opened() == []


def test_generic_tools_get_one_partial_per_chunk():
    updates = partial_args_updates("c1", "Grep", '{"pattern": "x"', "m1")
    assert len(updates) == 1
    assert updates[0].partial_tool_call.args_text_delta == '{"pattern": "x"'
    assert updates[0].partial_tool_call.tool_call.WhichOneof("tool") == "grep_tool_call"
    assert partial_args_updates("c1", "Grep", "", "m1") == []


def test_write_streams_path_then_content_with_newlines_normalized():
    text = json.dumps({"path": "src/ä.py", "contents": "line1\r\nline2\rline3\n\u00e9\U0001F600 \"q\""})
    for size in (1, 2, 3, 7, len(text)):
        stream = ArgsStream("c1", "Write", "m1", workspace_root="/ws")
        events = _edit_events(_feed_in_chunks(stream, text, size))
        assert events[0] == ("path", "/ws/src/ä.py"), size
        content = "".join(t for k, t in events[1:] if k == "content")
        assert content == 'line1\nline2\nline3\n\u00e9\U0001F600 "q"', size
        assert all(k == "content" for k, _ in events[1:])


def test_crlf_split_across_chunks_becomes_one_newline():
    stream = ArgsStream("c1", "Write", "m1")
    updates = stream.feed('{"path": "a", "contents": "x\\r')
    updates += stream.feed('\\ny"}')
    content = "".join(t for k, t in _edit_events(updates) if k == "content")
    assert content == "x\ny"


def test_str_replace_streams_new_string_only_and_holds_content_until_path():
    text = '{"old_string": "zz", "new_string": "a\\nb", "replace_all": false, "path": "f.txt"}'
    stream = ArgsStream("c1", "StrReplace", "m1")
    events = _edit_events(_feed_in_chunks(stream, text, 5))
    assert events == [("path", "f.txt"), ("content", "a\nb")]


def test_nested_values_are_not_mistaken_for_top_level_keys():
    text = '{"meta": {"path": "wrong"}, "path": "right", "contents": "ok"}'
    stream = ArgsStream("c1", "Write", "m1")
    assert _edit_events(stream.feed(text)) == [("path", "right"), ("content", "ok")]


def test_started_and_completed_updates(ctx):
    execution = start_tool(request("Delete", {"path": "a"}), ctx, model_call_id="m7")
    started = started_update(execution, started_at_ms=11).tool_call_started
    assert (started.call_id, started.model_call_id) == ("call-1", "m7")
    assert started.tool_call.started_at_ms == 11
    assert started.tool_call.delete_tool_call.args.path == "/ws/a"
    assert not started.tool_call.delete_tool_call.HasField("result")
    message = sent(execution.first())
    done(execution.on_exec_result(reply(message, delete_result=pb.DeleteResult(success=pb.DeleteSuccess()))))
    completed = completed_update(execution, completed_at_ms=12, started_at_ms=11).tool_call_completed
    assert completed.tool_call.delete_tool_call.result.HasField("success")
    assert completed.tool_call.completed_at_ms == 12
