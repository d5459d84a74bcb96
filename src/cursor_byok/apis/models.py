"""The configured models as Cursor's model-list messages (AvailableModels, GetUsableModels, defaults).

Pure functions of the config: no I/O. The picker gets one entry per configured model; when the
model has `efforts`, an "Effort" axis with one variant per effort, whose id is `<id>-<effort>`
(Config.model() maps such an id back to the model, `effort_for()` to the effort). There is no
"fast" axis: nothing here has a fast mode. No reply built here ever carries a real API key:
Cursor's CLI wants credentials on each usable model, so it gets a fixed, public placeholder.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from google.protobuf import json_format

from ..config import ModelConfig
from ..protocol import agent_pb2, side_pb2

# Not a secret: a marker telling Cursor's CLI the model needs no key from it.
LOCAL_API_KEY = "cursor-byok-local"
CONTEXT_PARAMETER = "context"
EFFORT_PARAMETER = "reasoning"
PICKER_BADGE = "BYOK"

# Values the anchor uses for its own models (PROTOCOL.md section 3): section 1 of the picker, the
# "Cursor" vendor with id 6, badge variant 1.
_NAMED_SECTION_INDEX = 1
_VENDOR_ID = 6
_VENDOR_KEY = "cursor"
_VENDOR_NAME = "Cursor"
_BADGE_VARIANT = 1

_EFFORT_NAMES = {
    "none": "None",
    "minimal": "Minimal",
    "low": "Low",
    "medium": "Medium",
    "high": "High",
    "xhigh": "Extra High",
    "max": "Max",
}

AvailableModel = side_pb2.AvailableModelsResponse.AvailableModel
_R = side_pb2.AvailableModelsResponse


def effort_display_name(effort: str) -> str:
    return _EFFORT_NAMES.get(effort, effort[:1].upper() + effort[1:])


def default_effort(model: ModelConfig) -> str:
    """The effort the picker preselects: the configured default if it is offered, else the first."""
    if not model.efforts:
        return ""
    return model.default_effort if model.default_effort in model.efforts else model.efforts[0]


def variant_ids(model: ModelConfig) -> list[str]:
    """The ids the IDE may send back for this model: `<id>-<effort>` per effort, or just `<id>`."""
    return [f"{model.id}-{effort}" for effort in model.efforts] or [model.id]


def effort_for(model: ModelConfig, model_id: str, parameters: Iterable[tuple[str, str]] = ()) -> str:
    """The effort a run asked for: the `reasoning` parameter, else a `-<effort>` suffix of the
    model id, else the model's default ('' when the model has no efforts)."""
    for key, value in parameters:
        if key == EFFORT_PARAMETER and value in model.efforts:
            return value
    suffix = model_id[len(model.id) + 1 :] if model_id.startswith(model.id + "-") else ""
    if suffix in model.efforts:
        return suffix
    # Other clients' slugs put more axes around the effort (`<id>-1m-high-fast`).
    for part in suffix.split("-"):
        if part in model.efforts:
            return part
    return default_effort(model) or model.default_effort


def context_label(tokens: int) -> tuple[str, str]:
    """(parameter value, display name) for a context window, e.g. (`200k`, `200K`)."""
    if tokens % 1_000_000 == 0:
        return f"{tokens // 1_000_000}m", f"{tokens // 1_000_000}M"
    if tokens % 1000 == 0:
        return f"{tokens // 1000}k", f"{tokens // 1000}K"
    return str(tokens), f"{tokens / 1000:.1f}K"


def _tooltip(model: ModelConfig) -> side_pb2.AvailableModelsResponse.TooltipData:
    text = f"**{model.label}**\n\nYour own `{model.model}` ({model.provider.value}), run locally by cursor-byok."
    return _R.TooltipData(markdown_content=text)


def _enum_parameter(
    pid: str, name: str, tooltip: str, values: Sequence[tuple[str, str]], hotkey: bool
) -> side_pb2.AvailableModelsResponse.ParameterDefinition:
    return _R.ParameterDefinition(
        id=pid,
        name=name,
        markdown_tooltip=tooltip,
        parameter_type=_R.ParameterType(
            enum_parameter=_R.EnumParameter(
                values=[_R.EnumParameterValue(value=v, display_name=d) for v, d in values]
            )
        ),
        is_cycleable_by_hotkey=hotkey,
    )


def _variants(
    model: ModelConfig, tooltip: side_pb2.AvailableModelsResponse.TooltipData
) -> list[side_pb2.AvailableModelsResponse.Variant]:
    context, _ = context_label(model.context_window)
    chosen = default_effort(model)
    variants = []
    for effort, vid in zip(model.efforts or [""], variant_ids(model), strict=True):
        values = [_R.ParameterValue(id=CONTEXT_PARAMETER, value=context)]
        representation = f"{model.id}[{CONTEXT_PARAMETER}={context}"
        display = model.label
        if effort:
            values.append(_R.ParameterValue(id=EFFORT_PARAMETER, value=effort))
            representation += f",{EFFORT_PARAMETER}={effort}"
            display = f"{model.label} {effort_display_name(effort)}"
        is_default = effort == chosen
        variant = _R.Variant(
            parameter_values=values,
            display_name=display,
            is_max_mode=False,
            tooltip_data=tooltip,
            display_name_outside_picker=display,
            variant_string_representation=representation + "]",
            legacy_slug=vid,
        )
        if is_default:
            variant.is_default_max_config = True
            variant.is_default_non_max_config = True
        variants.append(variant)
    return variants


def available_model(model: ModelConfig) -> side_pb2.AvailableModelsResponse.AvailableModel:
    """One AvailableModels entry, shaped like the anchor's (PROTOCOL.md section 3)."""
    tooltip = _tooltip(model)
    context_value, context_name = context_label(model.context_window)
    parameters = [
        _enum_parameter(
            CONTEXT_PARAMETER, "Context", "Context window of this model.", [(context_value, context_name)], False
        )
    ]
    if model.efforts:
        parameters.append(
            _enum_parameter(
                EFFORT_PARAMETER,
                "Effort",
                "How much reasoning the model does before it answers.",
                [(e, effort_display_name(e)) for e in model.efforts],
                True,
            )
        )
    variants = _variants(model, tooltip)
    window = min(model.context_window, 2**31 - 1)
    return AvailableModel(
        name=model.id,
        default_on=True,
        supports_agent=True,
        degradation_status=0,
        tooltip_data=tooltip,
        supports_thinking=True,
        supports_images=model.supports_images,
        supports_max_mode=True,
        context_token_limit=window,
        context_token_limit_for_max_mode=window,  # one window: max mode changes nothing
        client_display_name=model.label,
        server_model_name=model.id,
        supports_non_max_mode=True,
        tooltip_data_for_max_mode=tooltip,
        is_recommended_for_background_composer=False,
        supports_plan_mode=True,
        inputbox_short_model_name=model.label,
        supports_sandboxing=True,
        supports_cmd_k=False,
        parameter_definitions=parameters,
        variants=variants,
        legacy_slugs=[v.legacy_slug for v in variants],
        named_model_section_index=_NAMED_SECTION_INDEX,
        vendor_name=_VENDOR_KEY,
        vendor=_R.Vendor(id=_VENDOR_ID, name=_VENDOR_NAME),
        model_picker_badges=[_R.PickerBadge(label=PICKER_BADGE, variant=_BADGE_VARIANT)],
    )


def model_details(model: ModelConfig) -> agent_pb2.ModelDetails:
    """The model as agent.v1.ModelDetails (GetUsableModels, GetDefaultModelForCli)."""
    details = agent_pb2.ModelDetails(
        model_id=model.id,
        display_model_id=model.id,
        display_name=model.label,
        display_name_short=model.label,
        api_key_credentials=agent_pb2.ApiKeyCredentials(api_key=LOCAL_API_KEY),
    )
    details.thinking_details.SetInParent()  # present and empty
    return details


def rest_model_item(model: ModelConfig) -> dict[str, Any]:
    """The model as an item of the REST `GET /v1/models` list Cursor's SDK checks a model against:
    its variant ids as aliases, its efforts as the `reasoning` parameter."""
    item: dict[str, Any] = {"id": model.id, "displayName": model.label}
    aliases = [vid for vid in variant_ids(model) if vid != model.id]
    if aliases:
        item["aliases"] = aliases
    if model.efforts:
        chosen = default_effort(model)
        item["parameters"] = [
            {
                "id": EFFORT_PARAMETER,
                "displayName": "Effort",
                "values": [{"value": e, "displayName": effort_display_name(e)} for e in model.efforts],
            }
        ]
        item["variants"] = [
            {
                "params": [{"id": EFFORT_PARAMETER, "value": e}],
                "displayName": f"{model.label} {effort_display_name(e)}",
                **({"isDefault": True} if e == chosen else {}),
            }
            for e in model.efforts
        ]
    return item


class ModelCatalog(msgspec.Struct, frozen=True):
    """The replies for a fixed list of configured models (built once, served many times), as
    protobuf bytes and as Connect JSON documents (`json`, by the same names)."""

    models: tuple[ModelConfig, ...]
    available_models: bytes
    usable_models: bytes
    default_model_for_cli: bytes
    default_model: bytes
    default_model_nudge_data: bytes
    json: dict[str, dict[str, Any]]
    rest_models: dict[str, Any]  # the REST list: {"items": [...]}

    @classmethod
    def of(cls, models: Iterable[ModelConfig]) -> ModelCatalog:
        listed = tuple(models)
        ids = [m.id for m in listed]
        first = listed[0] if listed else None
        encoded = {
            "available_models": side_pb2.AvailableModelsResponse(
                model_names=ids, models=[available_model(m) for m in listed]
            ),
            "usable_models": side_pb2.GetUsableModelsResponse(models=[model_details(m) for m in listed]),
            "default_model_for_cli": side_pb2.GetDefaultModelForCliResponse(
                model=model_details(first) if first else None
            ),
            "default_model": side_pb2.GetDefaultModelResponse(
                model=first.id if first else "",
                thinking_model=first.id if first else "",
                max_mode=False,
                next_default_set_date="",
            ),
            "default_model_nudge_data": side_pb2.GetDefaultModelNudgeDataResponse(
                nudge_date="0",
                should_default_switch_on_new_chat=False,
                models_with_no_default_switch=ids,
                conversion_model_override="",
            ),
        }
        return cls(
            listed,
            **{name: message.SerializeToString(deterministic=True) for name, message in encoded.items()},
            json={name: json_format.MessageToDict(message) for name, message in encoded.items()},
            rest_models={"items": [rest_model_item(m) for m in listed]},
        )

    def __bool__(self) -> bool:
        return bool(self.models)
