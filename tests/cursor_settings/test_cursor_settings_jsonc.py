"""JSONC span edits: validation, value replacement, insertion and its exact inverse."""
from __future__ import annotations

import json

import pytest

from cursor_byok.cursor_settings import JsoncError, jsonc

TRICKY = """// Cursor settings
{
  /* theme */ "workbench.colorTheme": "Default Dark+", // trailing comment
  "files.exclude": {
    "**/.git": true,
    "**/node_modules": true,  // nested trailing comma ->
  },
  "a.url": "http://example.com//not-a-comment {still a string}",
  "quote\\"key": "esc \\u00e9 \\\\ /* not a comment */",
  "ünïcödé": ["日本語", 1.5e3, -0, null, false,],
  "editor.rulers": [
    80,
    120
  ]
}
"""


def test_top_level_members_and_values_are_found():
    doc = jsonc.parse_top_level(TRICKY)
    assert [m.key for m in doc.members] == [
        "workbench.colorTheme",
        "files.exclude",
        "a.url",
        'quote"key',
        "ünïcödé",
        "editor.rulers",
    ]
    assert jsonc.value_text(TRICKY, "a.url") == '"http://example.com//not-a-comment {still a string}"'
    assert jsonc.loads(jsonc.value_text(TRICKY, "files.exclude")) == {"**/.git": True, "**/node_modules": True}
    assert jsonc.loads(jsonc.value_text(TRICKY, "ünïcödé")) == ["日本語", 1500.0, 0, None, False]
    assert jsonc.value_text(TRICKY, "missing") is None
    assert jsonc.loads(TRICKY)["quote\"key"] == "esc é \\ /* not a comment */"


def test_set_value_replaces_only_the_value_span():
    out = jsonc.set_value(TRICKY, "files.exclude", "false")
    assert out == TRICKY.replace(
        '{\n    "**/.git": true,\n    "**/node_modules": true,  // nested trailing comma ->\n  }', "false"
    )
    out = jsonc.set_value(TRICKY, "a.url", '"x"')
    assert out == TRICKY.replace('"http://example.com//not-a-comment {still a string}"', '"x"')
    with pytest.raises(JsoncError):
        jsonc.set_value(TRICKY, "a.url", "not json")


def test_duplicate_keys_edit_the_effective_last_one():
    text = '{\n  "k": 1,\n  "k": 2\n}'
    assert jsonc.value_text(text, "k") == "2"
    assert jsonc.set_value(text, "k", "3") == '{\n  "k": 1,\n  "k": 3\n}'
    assert jsonc.remove(text, "k") == "{\n}"


@pytest.mark.parametrize(
    "text,expected",
    [
        ('{\n\t"a": 1\n}', '{\n\t"a": 1,\n\t"new": true\n}'),
        ('{\n  "a": 1,\n}', '{\n  "a": 1,\n  "new": true,\n}'),
        ('{\r\n  "a": 1\r\n}\r\n', '{\r\n  "a": 1,\r\n  "new": true\r\n}\r\n'),
        ('{\n  "a": 1 // why\n}', '{\n  "a": 1, // why\n  "new": true\n}'),
        ('{\n  "a": 1 /* why */\n}', '{\n  "a": 1, /* why */\n  "new": true\n}'),
        ("{}", '{\n    "new": true\n}'),
        ("{\n  // nothing yet\n}", '{\n    "new": true\n  // nothing yet\n}'),
        ('{"a": 1}', '{"a": 1,\n    "new": true}'),
        ('{\n"a": 1\n}', '{\n"a": 1,\n"new": true\n}'),
    ],
)
def test_insert_matches_the_file_style(text, expected):
    out = jsonc.set_value(text, "new", "true")
    assert out == expected
    assert jsonc.loads(out)["new"] is True


@pytest.mark.parametrize(
    "text",
    [
        TRICKY,
        '{\n\t"a": 1\n}',
        '{\n  "a": 1,\n}',
        '{\r\n  "a": 1\r\n}\r\n',
        '{\n  "a": 1 // why\n}',
        '{\n  "a": 1, // why\n}',
        '{\n  "a": 1 /* multi\n  line */\n}',
        "{\n}",
        "{ // c\n}",
        '{"a": 1}',
        '{"a": 1 }',
        '\ufeff{\n  "a": "x"\n}',
    ],
)
def test_remove_is_the_exact_inverse_of_insert(text):
    edited = text
    for i, key in enumerate(["k1", "k2", "k3"]):
        edited = jsonc.set_value(edited, key, json.dumps([i, "//", "{"]))
    assert jsonc.loads(edited)["k3"] == [2, "//", "{"]
    for key in ["k3", "k2", "k1"]:
        edited = jsonc.remove(edited, key)
    assert edited == text


def test_remove_of_a_missing_key_changes_nothing():
    assert jsonc.remove(TRICKY, "nope") == TRICKY


@pytest.mark.parametrize(
    "text,where",
    [
        ('{\n  "a": 1\n  "b": 2\n}', "line 3"),  # missing comma
        ('{\n  "a": "unterminated\n}', "line 2"),
        ("{\n  /* never closed\n}", "line 2"),
        ("[1, 2]", "line 1"),
        ('{"a": 1} trailing', "line 1"),
        ("{'a': 1}", "line 1"),
        ('{"a": 01}', "line 1"),
        ('{"a": tru}', "line 1"),
        ('{"a": "\\x"}', "line 1"),
        ("", "line 1"),
        ('{"a": 1', "line 1"),
    ],
)
def test_invalid_documents_are_rejected_with_a_position(text, where):
    with pytest.raises(JsoncError, match=where):
        jsonc.parse_top_level(text)
