"""Read another tool's model settings into candidate `[[models]]` tables.

Three formats, told apart by their top-level key: the reference desktop app's YAML
(`modelAdapters`), LiteLLM's proxy config (`model_list`) and claude-code-router's JSON
(`Providers`). Each model becomes a `Candidate`: config keys in our terms, where its API key comes
from, and notes on what the config cannot express (reported, never dropped silently).
"""
from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config import ProviderKind


class SourceError(Exception):
    """The file to import cannot be read or is not a known format (one line, names the file)."""


class SourceFormat(str, enum.Enum):
    REFERENCE_APP = "reference desktop app config (modelAdapters)"
    LITELLM = "LiteLLM config (model_list)"
    CLAUDE_CODE_ROUTER = "claude-code-router config (Providers)"


@dataclass(frozen=True, slots=True)
class KeyRef:
    """A model's API key as the source gives it: a literal value or an environment variable name."""

    literal: str = ""
    env: str = ""


@dataclass(slots=True)
class Candidate:
    id: str
    fields: dict[str, Any]  # config keys of a [[models]] table, without id and key
    key: KeyRef | None = None
    secret_name: str = ""  # name for a literal key in the secrets file
    notes: list[str] = field(default_factory=list)  # settings not imported, and why
    skip: str = ""  # why the model cannot be imported at all


@dataclass(frozen=True, slots=True)
class ForeignConfig:
    format: SourceFormat
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)  # the file's other settings, not imported


# Why a top-level setting of another tool has no counterpart here (any other: no matching setting).
_TOP_LEVEL_WHY = {
    "Router": "Cursor sends each request with the model picked in the IDE; pick it there",
    "router_settings": "no routing, fallbacks or load balancing here: each Cursor model id is one model",
}


_ENV_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
# URL endings that name the protocol (the providers accept a base URL or the full endpoint URL).
_ENDPOINT_KINDS = (
    ("/chat/completions", ProviderKind.OPENAI_CHAT),
    ("/responses", ProviderKind.OPENAI_RESPONSES),
    ("/messages", ProviderKind.ANTHROPIC),
)


def model_id(text: str) -> str:
    """A model id Cursor can show and select: lower case, runs of other characters become one '-'."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-")


def secret_name(text: str) -> str:
    """A bare TOML key for the secrets file."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-") or "imported"


def endpoint_kind(url: str) -> ProviderKind | None:
    path = url.rstrip("/")
    return next((kind for suffix, kind in _ENDPOINT_KINDS if path.endswith(suffix)), None)


def key_ref(value: Any) -> KeyRef | None:
    """`os.environ/NAME`, `$NAME` and `${NAME}` name a variable; any other text is the key itself."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if value.startswith("os.environ/"):
        return KeyRef(env=value.removeprefix("os.environ/"))
    if m := _ENV_REFERENCE.fullmatch(value):
        return KeyRef(env=m.group(1))
    return KeyRef(literal=value)


def positive_int(value: Any) -> int | None:
    """A token count; 0, empty and non-numbers mean unset."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def _json_object(raw: Any, what: str, notes: list[str]) -> dict[str, Any]:
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            notes.append(f"{what} is not valid JSON: not imported")
            return {}
    if not isinstance(raw, dict):
        notes.append(f"{what} is not a JSON object: not imported")
        return {}
    return raw


def headers(raw: Any, what: str, notes: list[str]) -> dict[str, str]:
    """Static headers; templated values (filled per request by the other tool) cannot be expressed."""
    kept: dict[str, str] = {}
    for name, value in _json_object(raw, what, notes).items():
        if not isinstance(value, str) or "{{" in value or "${" in value:
            notes.append(f"{what}: header {name!r} is not a fixed text value: not imported")
        else:
            kept[str(name)] = value
    return kept


def _holds_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_null(v) for v in value)
    return value is None


def params(raw: dict[str, Any], what: str, notes: list[str]) -> dict[str, Any]:
    """Request-body parameters; TOML has no null, so a null (the other tool's 'remove') is reported."""
    kept: dict[str, Any] = {}
    for name, value in raw.items():
        if _holds_null(value):
            notes.append(f"{what}: {name!r} is or holds null (TOML cannot express it): not imported")
        else:
            kept[str(name)] = value
    return kept


def _text(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    return value.strip() if isinstance(value, str) else ""


# -- the reference desktop app: modelAdapters[] ---------------------------------------------------

_ADAPTER_KEYS = {
    "displayName", "type", "baseURL", "apiKey", "modelID", "reasoningEffort", "openAIEndpoint",
    "contextWindowTokens", "maxCompletionTokens", "anthropicMaxTokens", "thinkingBudgetTokens",
    "customHeadersJSON", "openAIExtraParamsJSON", "anthropicExtraParamsJSON",
}  # fmt: skip


def _adapter(index: int, entry: dict[str, Any]) -> Candidate:
    where = f"modelAdapters[{index}]"
    notes = [f"{key} not imported (no matching setting)" for key in entry if key not in _ADAPTER_KEYS]
    kind_name = _text(entry, "type").lower() or "openai"
    model = _text(entry, "modelID")
    name = _text(entry, "displayName") or model
    candidate = Candidate(model_id(name), {}, key_ref(entry.get("apiKey")), secret_name(name), notes)
    if kind_name not in ("openai", "anthropic"):
        candidate.skip = f"{where}: type {kind_name!r} is not openai or anthropic"
        return candidate
    if not model:
        candidate.skip = f"{where}: modelID is empty"
        return candidate
    base_url = _text(entry, "baseURL")
    endpoint = _text(entry, "openAIEndpoint")
    if kind_name == "anthropic":
        kind = ProviderKind.ANTHROPIC
        max_output = entry.get("anthropicMaxTokens")
        extra, ignored = "anthropicExtraParamsJSON", "openAIExtraParamsJSON"
    else:
        kind = endpoint_kind(endpoint) or endpoint_kind(base_url) or ProviderKind.OPENAI_CHAT
        if endpoint.startswith(("http://", "https://")):
            base_url = endpoint  # a full endpoint URL is where requests go
        max_output = entry.get("maxCompletionTokens")
        extra, ignored = "openAIExtraParamsJSON", "anthropicExtraParamsJSON"
    if _json_object(entry.get(ignored), ignored, []):
        notes.append(f"{ignored} not imported (applies to {'openai' if kind_name == 'anthropic' else 'anthropic'} adapters)")
    fields: dict[str, Any] = {"display_name": name, "provider": kind.value, "base_url": base_url, "model": model}
    if window := positive_int(entry.get("contextWindowTokens")):
        fields["context_window"] = window
    if max_output := positive_int(max_output):
        fields["max_output_tokens"] = max_output
    if effort := _text(entry, "reasoningEffort"):
        fields["default_effort"] = effort
    if budget := positive_int(entry.get("thinkingBudgetTokens")):
        if kind is ProviderKind.ANTHROPIC:
            fields["thinking_budget_tokens"] = budget
        else:
            notes.append("thinkingBudgetTokens not imported (thinking budgets apply to anthropic models)")
    if extra_headers := headers(entry.get("customHeadersJSON"), "customHeadersJSON", notes):
        fields["extra_headers"] = extra_headers
    if extra_params := params(_json_object(entry.get(extra), extra, notes), extra, notes):
        fields["extra_params"] = extra_params
    candidate.fields = fields
    return candidate


# -- LiteLLM: model_list[] -------------------------------------------------------------------------

# OpenAI-compatible LiteLLM provider prefixes: default base URL, and a path its api_base lacks.
_LITELLM_OPENAI_COMPATIBLE = {
    "openai": ("https://api.openai.com/v1", ""),
    "openrouter": ("https://openrouter.ai/api/v1", ""),
    "deepseek": ("https://api.deepseek.com", ""),
    "groq": ("https://api.groq.com/openai/v1", ""),
    "mistral": ("https://api.mistral.ai/v1", ""),
    "xai": ("https://api.x.ai/v1", ""),
    "together_ai": ("https://api.together.xyz/v1", ""),
    "fireworks_ai": ("https://api.fireworks.ai/inference/v1", ""),
    "ollama": ("http://localhost:11434/v1", "/v1"),
    "ollama_chat": ("http://localhost:11434/v1", "/v1"),
    "lm_studio": ("http://localhost:1234/v1", ""),
    "hosted_vllm": ("", ""),
}
# litellm_params that are request-body parameters of the provider API (kept as extra_params).
_LITELLM_BODY_PARAMS = {
    "temperature", "top_p", "top_k", "seed", "stop", "presence_penalty", "frequency_penalty",
    "parallel_tool_calls", "thinking", "reasoning", "logit_bias", "service_tier", "user",
}  # fmt: skip
_LITELLM_HANDLED = {"model", "api_key", "api_base", "max_tokens", "timeout", "reasoning_effort", "extra_headers", "headers"}


def _resolve_env_text(value: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """(text, problem): `os.environ/NAME` outside api_key is read now, since the config holds text."""
    if not value.startswith("os.environ/"):
        return value, ""
    name = value.removeprefix("os.environ/")
    return (environ[name], "") if name in environ else ("", f"environment variable {name} is not set")


def _litellm_model(index: int, entry: dict[str, Any], environ: Mapping[str, str]) -> Candidate:
    where = f"model_list[{index}]"
    name = _text(entry, "model_name")
    raw_params = entry.get("litellm_params")
    lp: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    candidate = Candidate(model_id(name), {}, key_ref(lp.get("api_key")), secret_name(name))
    target = _text(lp, "model")
    if not name or not target:
        candidate.skip = f"{where}: model_name and litellm_params.model are required"
        return candidate
    if "*" in name or "*" in target:
        candidate.skip = f"{where}: wildcard routes cannot be imported"
        return candidate
    prefix, _, rest = target.partition("/")
    if not rest:
        prefix, rest = ("anthropic" if target.startswith("claude") else "openai"), target
    api_base, problem = _resolve_env_text(_text(lp, "api_base"), environ)
    if problem:
        candidate.skip = f"{where}: api_base: {problem}"
        return candidate
    notes = candidate.notes
    if prefix == "anthropic":
        kind, base_url = ProviderKind.ANTHROPIC, api_base
    elif prefix in _LITELLM_OPENAI_COMPATIBLE:
        default_base, missing_path = _LITELLM_OPENAI_COMPATIBLE[prefix]
        kind, base_url = ProviderKind.OPENAI_CHAT, api_base or default_base
        if api_base and missing_path and not api_base.rstrip("/").endswith(missing_path):
            base_url = api_base.rstrip("/") + missing_path
        if not base_url:
            candidate.skip = f"{where}: provider {prefix!r} needs an api_base"
            return candidate
    elif api_base:
        kind, base_url = ProviderKind.OPENAI_CHAT, api_base
        notes.append(f"provider {prefix!r} imported as OpenAI-compatible at its api_base")
    else:
        candidate.skip = f"{where}: provider {prefix!r} is not supported (give it an OpenAI-compatible api_base)"
        return candidate
    fields: dict[str, Any] = {"display_name": name} if candidate.id != name else {}
    fields.update(provider=kind.value, base_url=base_url, model=rest)
    info = entry.get("model_info")
    info = info if isinstance(info, dict) else {}
    if window := positive_int(info.get("max_input_tokens")):
        fields["context_window"] = window
    if max_output := positive_int(lp.get("max_tokens")) or positive_int(info.get("max_output_tokens")):
        fields["max_output_tokens"] = max_output
    if effort := _text(lp, "reasoning_effort"):
        fields["default_effort"] = effort
    if isinstance(lp.get("timeout"), int | float) and not isinstance(lp.get("timeout"), bool) and lp["timeout"] > 0:
        fields["request_timeout_seconds"] = float(lp["timeout"])
    extra_headers = {**headers(lp.get("headers"), "litellm_params.headers", notes), **headers(lp.get("extra_headers"), "litellm_params.extra_headers", notes)}
    if extra_headers:
        fields["extra_headers"] = extra_headers
    body = {k: v for k, v in lp.items() if k in _LITELLM_BODY_PARAMS}
    if extra_params := params(body, "litellm_params", notes):
        fields["extra_params"] = extra_params
    notes += [f"litellm_params.{k} not imported (no matching setting)" for k in lp if k not in _LITELLM_HANDLED | _LITELLM_BODY_PARAMS]
    notes += [f"{k} not imported (no matching setting)" for k in entry if k not in ("model_name", "litellm_params", "model_info")]
    candidate.fields = fields
    return candidate


# -- claude-code-router: Providers[] ---------------------------------------------------------------

_CCR_PROVIDER_KEYS = {"name", "api_base_url", "api_key", "models", "transformer"}


def _ccr_provider(index: int, entry: dict[str, Any]) -> list[Candidate]:
    where = f"Providers[{index}]"
    name = _text(entry, "name")
    url = _text(entry, "api_base_url")
    models = entry.get("models")
    models = [m for m in models if isinstance(m, str) and m.strip()] if isinstance(models, list) else []
    key = key_ref(entry.get("api_key"))
    if not models:
        return [Candidate(model_id(name) or where, {}, key, skip=f"{where}: no models listed")]
    notes = [f"{k} not imported (no matching setting)" for k in entry if k not in _CCR_PROVIDER_KEYS]
    transformer = entry.get("transformer")
    uses = json.dumps(transformer) if transformer else ""
    if transformer:
        notes.append("transformer not imported (requests go to the provider's own API unchanged)")
    skip = ""
    if not name or not url:
        skip = f"{where}: name and api_base_url are required"
    elif "gemini" in uses.lower() and endpoint_kind(url) is None:
        skip = f"{where}: the Gemini API is not supported (use its OpenAI-compatible endpoint)"
    kind = endpoint_kind(url) or ProviderKind.OPENAI_CHAT
    return [
        Candidate(
            model_id(f"{name}-{model}"),
            {"display_name": f"{model} ({name})", "provider": kind.value, "base_url": url, "model": model},
            key,
            secret_name(name),
            list(notes),
            skip,
        )
        for model in models
    ]


# -- detection -------------------------------------------------------------------------------------


def _read_entries(data: dict[str, Any], key: str, read: Callable[[int, dict[str, Any]], list[Candidate]]) -> list[Candidate]:
    items = data[key]
    if not isinstance(items, list):
        raise SourceError(f"{key} is not a list")
    found: list[Candidate] = []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            found += read(i, item)
        else:
            found.append(Candidate(f"{key}[{i}]", {}, skip=f"{key}[{i}]: not a mapping"))
    return found


def parse_foreign(data: Any, environ: Mapping[str, str]) -> ForeignConfig:
    if not isinstance(data, dict):
        raise SourceError("top level is not a mapping")
    readers: list[tuple[str, SourceFormat, Callable[[int, dict[str, Any]], list[Candidate]]]] = [
        ("modelAdapters", SourceFormat.REFERENCE_APP, lambda i, e: [_adapter(i, e)]),
        ("model_list", SourceFormat.LITELLM, lambda i, e: [_litellm_model(i, e, environ)]),
        ("Providers", SourceFormat.CLAUDE_CODE_ROUTER, _ccr_provider),
    ]
    for key, fmt, read in readers:
        if key in data:
            notes = [f"{other} not imported ({_TOP_LEVEL_WHY.get(other, 'no matching setting')})" for other in data if other != key]
            return ForeignConfig(fmt, _read_entries(data, key, read), notes)
    raise SourceError("not a known format (expected modelAdapters, model_list or Providers at the top level)")


def read_foreign_config(path: Path, environ: Mapping[str, str]) -> ForeignConfig:
    """Read and translate `path`; JSON is read as JSON, anything else as YAML (`safe_load`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a text file") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SourceError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {str(exc).splitlines()[0]}") from None
    try:
        return parse_foreign(data, environ)
    except SourceError as exc:
        raise SourceError(f"{path}: {exc}") from None
