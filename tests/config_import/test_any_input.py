"""Whatever another tool's file holds under a known top-level key, the import either rejects the
file in one line or produces tables that validate: no traceback, no invalid config written."""
from __future__ import annotations

import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cursor_byok.config import parse
from cursor_byok.config_import import SourceError, merged_config_text, parse_foreign, plan_import, validate

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300_000) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
# Values the formats' own keys often hold: plausible text, URLs, JSON text, numbers as text.
PLAUSIBLE = JSON | st.sampled_from([
    "openai", "anthropic", "gemini", "https://api.example.test/v1/chat/completions", "https://x.test/v1/responses",
    "os.environ/SOME_KEY", "$OTHER_KEY", '{"a": "b"}', '{"h": "{{x}}"}', "[1]", "0", "128000",
    "openai/gpt-x", "anthropic/claude-x", "ollama/llama", "bedrock/x", "*", "",
])  # fmt: skip

NAME = st.text(min_size=1, max_size=10)
SECRET = "sk-secret-marker"  # longer than any generated text: found in the output only if a key leaked
KEY = st.sampled_from([SECRET, "os.environ/SOME_KEY", "$OTHER_KEY", "", 0])
ADAPTER = st.fixed_dictionaries(
    {"modelID": NAME, "type": st.sampled_from(["openai", "anthropic", "gemini", ""])},
    optional={"apiKey": KEY} | {k: PLAUSIBLE for k in (
        "displayName", "baseURL", "reasoningEffort", "openAIEndpoint", "contextWindowTokens", "maxCompletionTokens",
        "anthropicMaxTokens", "thinkingBudgetTokens", "customHeadersJSON", "openAIExtraParamsJSON", "anthropicExtraParamsJSON",
        "somethingElse",
    )},
)  # fmt: skip
LITELLM = st.fixed_dictionaries(
    {
        "model_name": NAME,
        "litellm_params": st.fixed_dictionaries(
            {"model": st.sampled_from(["openai/gpt-x", "anthropic/claude-x", "claude-y", "gpt-z", "ollama/l", "hosted_vllm/v", "bedrock/b", "odd/o"]) | NAME},
            optional={"api_key": KEY} | {k: PLAUSIBLE for k in ("api_base", "max_tokens", "timeout", "temperature", "extra_headers", "headers", "stop", "rpm")},
        ),
    },
    optional={"model_info": JSON},
)
CCR = st.fixed_dictionaries(
    {"name": NAME, "api_base_url": PLAUSIBLE, "models": st.lists(NAME | JSON, min_size=1, max_size=3)},
    optional={"api_key": KEY, "transformer": JSON},
)
DOCUMENTS = st.one_of(
    st.fixed_dictionaries({"modelAdapters": st.lists(ADAPTER | JSON, max_size=4)}),
    st.fixed_dictionaries({"model_list": st.lists(LITELLM | JSON, max_size=4)}),
    st.fixed_dictionaries({"Providers": st.lists(CCR | JSON, max_size=4)}),
    JSON,
)


# A config whose last table is not [[models]]: new tables must still land in the models array.
CURRENT = '[server]\nport = 8787\n\n[[models]]\nid = "existing"\nprovider = "anthropic"\nmodel = "m"\n\n[proxy]\nport = 8788\n'


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
def test_any_document_is_rejected_in_one_line_or_imported_as_valid_tables(document: object) -> None:
    try:
        foreign = parse_foreign(document, {})
    except SourceError as exc:
        assert "\n" not in str(exc)
        return
    existing = parse(tomllib.loads(CURRENT))
    plan = plan_import(foreign, Path("source"), existing, Path("/nonexistent/config.toml"), Path("/nonexistent/secrets.toml"), {})
    validate(plan, CURRENT, "")  # raises ConfigError unless the merged file loads and holds every new table
    assert plan.imported == len(plan.tables) and len(plan.reports) == len(foreign.candidates)
    assert set(plan.secrets.values()) <= {c.key.literal for c in foreign.candidates if c.key}
    assert SECRET not in merged_config_text(plan, CURRENT)
