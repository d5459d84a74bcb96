"""The configured models as Cursor model-list messages (pure: no server involved)."""
from __future__ import annotations

from cursor_byok.apis.models import (
    LOCAL_API_KEY,
    ModelCatalog,
    available_model,
    context_label,
    effort_for,
    model_details,
    variant_ids,
)
from cursor_byok.config import parse
from cursor_byok.protocol import side_pb2

from .conftest import MODELS, SECRET

CONFIG = parse({"models": MODELS})
GPT, CLAUDE = CONFIG.models


def test_effort_models_get_one_variant_per_effort_with_resolvable_ids() -> None:
    entry = available_model(GPT)
    assert [v.legacy_slug for v in entry.variants] == ["byok-gpt-low", "byok-gpt-medium", "byok-gpt-high"]
    assert list(entry.legacy_slugs) == variant_ids(GPT) == ["byok-gpt-low", "byok-gpt-medium", "byok-gpt-high"]
    assert [d.id for d in entry.parameter_definitions] == ["context", "reasoning"]
    effort_axis = entry.parameter_definitions[1]
    assert effort_axis.name == "Effort"
    assert [v.value for v in effort_axis.parameter_type.enum_parameter.values] == ["low", "medium", "high"]
    defaults = [v.legacy_slug for v in entry.variants if v.is_default_non_max_config]
    assert defaults == ["byok-gpt-medium"]  # the configured default_effort
    assert entry.variants[2].display_name == "BYOK GPT High"
    assert entry.variants[2].variant_string_representation == "byok-gpt[context=400k,reasoning=high]"
    assert [(p.id, p.value) for p in entry.variants[0].parameter_values] == [("context", "400k"), ("reasoning", "low")]
    # Every id the picker may send back resolves to this model, and to the right effort.
    for slug, effort in zip(variant_ids(GPT), ["low", "medium", "high"], strict=True):
        assert CONFIG.model(slug) is GPT
        assert effort_for(GPT, slug) == effort


def test_available_model_fields_follow_the_config() -> None:
    entry = available_model(GPT)
    assert entry.name == entry.server_model_name == "byok-gpt"
    assert entry.client_display_name == entry.inputbox_short_model_name == "BYOK GPT"
    assert entry.context_token_limit == entry.context_token_limit_for_max_mode == 400_000
    assert entry.default_on and entry.supports_agent and entry.supports_plan_mode and entry.supports_images
    assert entry.HasField("supports_cmd_k") and not entry.supports_cmd_k  # explicitly false on the wire
    assert entry.HasField("degradation_status") and entry.degradation_status == 0
    assert entry.vendor.id == 6 and entry.vendor.name == "Cursor"
    assert [b.label for b in entry.model_picker_badges] == ["BYOK"]
    assert "gpt-test" in entry.tooltip_data.markdown_content
    claude = available_model(CLAUDE)
    assert claude.client_display_name == "byok-claude"  # no display_name: the id
    assert not claude.supports_images and claude.HasField("supports_images")


def test_model_without_efforts_has_a_single_default_variant() -> None:
    entry = available_model(CLAUDE)
    assert [d.id for d in entry.parameter_definitions] == ["context"]
    assert len(entry.variants) == 1
    (variant,) = entry.variants
    assert variant.legacy_slug == "byok-claude"
    assert variant.is_default_max_config and variant.is_default_non_max_config
    assert [(p.id, p.value) for p in variant.parameter_values] == [("context", "200k")]
    assert effort_for(CLAUDE, "byok-claude") == ""


def test_effort_for_reads_parameters_suffixes_and_defaults() -> None:
    assert effort_for(GPT, "byok-gpt", [("reasoning", "high")]) == "high"
    assert effort_for(GPT, "byok-gpt", [("reasoning", "bogus")]) == "medium"  # unknown value: default
    assert effort_for(GPT, "byok-gpt-400k-low-fast") == "low"  # other clients' slug shapes
    assert effort_for(GPT, "byok-gpt") == "medium"


def test_context_labels() -> None:
    assert context_label(200_000) == ("200k", "200K")
    assert context_label(1_000_000) == ("1m", "1M")
    assert context_label(131_072) == ("131072", "131.1K")


def test_model_details_carry_the_placeholder_key_only() -> None:
    details = model_details(GPT)
    assert (details.model_id, details.display_model_id) == ("byok-gpt", "byok-gpt")
    assert (details.display_name, details.display_name_short) == ("BYOK GPT", "BYOK GPT")
    assert details.HasField("thinking_details")
    assert details.WhichOneof("credentials") == "api_key_credentials"
    assert details.api_key_credentials.api_key == LOCAL_API_KEY == "cursor-byok-local"
    assert not details.api_key_credentials.HasField("base_url")


def test_catalog_replies_decode_and_name_the_first_model_as_default() -> None:
    catalog = ModelCatalog.of(CONFIG.models)
    listed = side_pb2.AvailableModelsResponse.FromString(catalog.available_models)
    assert list(listed.model_names) == ["byok-gpt", "byok-claude"]
    usable = side_pb2.GetUsableModelsResponse.FromString(catalog.usable_models)
    assert [m.model_id for m in usable.models] == ["byok-gpt", "byok-claude"]
    cli = side_pb2.GetDefaultModelForCliResponse.FromString(catalog.default_model_for_cli)
    assert cli.model.model_id == "byok-gpt"
    default = side_pb2.GetDefaultModelResponse.FromString(catalog.default_model)
    assert (default.model, default.thinking_model, default.max_mode) == ("byok-gpt", "byok-gpt", False)
    nudge = side_pb2.GetDefaultModelNudgeDataResponse.FromString(catalog.default_model_nudge_data)
    assert nudge.nudge_date == "0" and not nudge.should_default_switch_on_new_chat
    assert list(nudge.models_with_no_default_switch) == ["byok-gpt", "byok-claude"]
    for body in (catalog.available_models, catalog.usable_models, catalog.default_model_for_cli):
        assert SECRET.encode() not in body
    assert not ModelCatalog.of([])
