from cursor_byok.protocol.pb import agent_v1_pb2 as _agent_v1_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AvailableModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AvailableModelsResponse(_message.Message):
    __slots__ = ("model_names", "models")
    class TooltipData(_message.Message):
        __slots__ = ("markdown_content",)
        MARKDOWN_CONTENT_FIELD_NUMBER: _ClassVar[int]
        markdown_content: str
        def __init__(self, markdown_content: _Optional[str] = ...) -> None: ...
    class EnumParameterValue(_message.Message):
        __slots__ = ("value", "display_name")
        VALUE_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        value: str
        display_name: str
        def __init__(self, value: _Optional[str] = ..., display_name: _Optional[str] = ...) -> None: ...
    class EnumParameter(_message.Message):
        __slots__ = ("values",)
        VALUES_FIELD_NUMBER: _ClassVar[int]
        values: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.EnumParameterValue]
        def __init__(self, values: _Optional[_Iterable[_Union[AvailableModelsResponse.EnumParameterValue, _Mapping]]] = ...) -> None: ...
    class BooleanParameterValue(_message.Message):
        __slots__ = ("value", "display_name", "increases_model_cost")
        VALUE_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        INCREASES_MODEL_COST_FIELD_NUMBER: _ClassVar[int]
        value: str
        display_name: str
        increases_model_cost: bool
        def __init__(self, value: _Optional[str] = ..., display_name: _Optional[str] = ..., increases_model_cost: _Optional[bool] = ...) -> None: ...
    class BooleanParameter(_message.Message):
        __slots__ = ("values",)
        VALUES_FIELD_NUMBER: _ClassVar[int]
        values: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.BooleanParameterValue]
        def __init__(self, values: _Optional[_Iterable[_Union[AvailableModelsResponse.BooleanParameterValue, _Mapping]]] = ...) -> None: ...
    class ParameterType(_message.Message):
        __slots__ = ("boolean_parameter", "enum_parameter")
        BOOLEAN_PARAMETER_FIELD_NUMBER: _ClassVar[int]
        ENUM_PARAMETER_FIELD_NUMBER: _ClassVar[int]
        boolean_parameter: AvailableModelsResponse.BooleanParameter
        enum_parameter: AvailableModelsResponse.EnumParameter
        def __init__(self, boolean_parameter: _Optional[_Union[AvailableModelsResponse.BooleanParameter, _Mapping]] = ..., enum_parameter: _Optional[_Union[AvailableModelsResponse.EnumParameter, _Mapping]] = ...) -> None: ...
    class ParameterDefinition(_message.Message):
        __slots__ = ("id", "name", "markdown_tooltip", "parameter_type", "is_cycleable_by_hotkey")
        ID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        MARKDOWN_TOOLTIP_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_TYPE_FIELD_NUMBER: _ClassVar[int]
        IS_CYCLEABLE_BY_HOTKEY_FIELD_NUMBER: _ClassVar[int]
        id: str
        name: str
        markdown_tooltip: str
        parameter_type: AvailableModelsResponse.ParameterType
        is_cycleable_by_hotkey: bool
        def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., markdown_tooltip: _Optional[str] = ..., parameter_type: _Optional[_Union[AvailableModelsResponse.ParameterType, _Mapping]] = ..., is_cycleable_by_hotkey: _Optional[bool] = ...) -> None: ...
    class ParameterValue(_message.Message):
        __slots__ = ("id", "value")
        ID_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        id: str
        value: str
        def __init__(self, id: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class Variant(_message.Message):
        __slots__ = ("parameter_values", "display_name", "is_max_mode", "is_default_max_config", "is_default_non_max_config", "tooltip_data", "display_name_outside_picker", "variant_string_representation", "legacy_slug")
        PARAMETER_VALUES_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        IS_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        IS_DEFAULT_MAX_CONFIG_FIELD_NUMBER: _ClassVar[int]
        IS_DEFAULT_NON_MAX_CONFIG_FIELD_NUMBER: _ClassVar[int]
        TOOLTIP_DATA_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_OUTSIDE_PICKER_FIELD_NUMBER: _ClassVar[int]
        VARIANT_STRING_REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
        LEGACY_SLUG_FIELD_NUMBER: _ClassVar[int]
        parameter_values: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.ParameterValue]
        display_name: str
        is_max_mode: bool
        is_default_max_config: bool
        is_default_non_max_config: bool
        tooltip_data: AvailableModelsResponse.TooltipData
        display_name_outside_picker: str
        variant_string_representation: str
        legacy_slug: str
        def __init__(self, parameter_values: _Optional[_Iterable[_Union[AvailableModelsResponse.ParameterValue, _Mapping]]] = ..., display_name: _Optional[str] = ..., is_max_mode: _Optional[bool] = ..., is_default_max_config: _Optional[bool] = ..., is_default_non_max_config: _Optional[bool] = ..., tooltip_data: _Optional[_Union[AvailableModelsResponse.TooltipData, _Mapping]] = ..., display_name_outside_picker: _Optional[str] = ..., variant_string_representation: _Optional[str] = ..., legacy_slug: _Optional[str] = ...) -> None: ...
    class Vendor(_message.Message):
        __slots__ = ("id", "name")
        ID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        id: int
        name: str
        def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...
    class PickerBadge(_message.Message):
        __slots__ = ("label", "variant", "dismiss_on_selection")
        LABEL_FIELD_NUMBER: _ClassVar[int]
        VARIANT_FIELD_NUMBER: _ClassVar[int]
        DISMISS_ON_SELECTION_FIELD_NUMBER: _ClassVar[int]
        label: str
        variant: int
        dismiss_on_selection: bool
        def __init__(self, label: _Optional[str] = ..., variant: _Optional[int] = ..., dismiss_on_selection: _Optional[bool] = ...) -> None: ...
    class AvailableModel(_message.Message):
        __slots__ = ("name", "default_on", "supports_agent", "degradation_status", "tooltip_data", "supports_thinking", "supports_images", "supports_max_mode", "context_token_limit", "context_token_limit_for_max_mode", "client_display_name", "server_model_name", "supports_non_max_mode", "tooltip_data_for_max_mode", "is_recommended_for_background_composer", "supports_plan_mode", "inputbox_short_model_name", "supports_sandboxing", "supports_cmd_k", "parameter_definitions", "variants", "legacy_slugs", "named_model_section_index", "vendor_name", "vendor", "model_picker_badges")
        NAME_FIELD_NUMBER: _ClassVar[int]
        DEFAULT_ON_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_AGENT_FIELD_NUMBER: _ClassVar[int]
        DEGRADATION_STATUS_FIELD_NUMBER: _ClassVar[int]
        TOOLTIP_DATA_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_THINKING_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_IMAGES_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_TOKEN_LIMIT_FOR_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        CLIENT_DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        SERVER_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_NON_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        TOOLTIP_DATA_FOR_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        IS_RECOMMENDED_FOR_BACKGROUND_COMPOSER_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_PLAN_MODE_FIELD_NUMBER: _ClassVar[int]
        INPUTBOX_SHORT_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_SANDBOXING_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_CMD_K_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
        VARIANTS_FIELD_NUMBER: _ClassVar[int]
        LEGACY_SLUGS_FIELD_NUMBER: _ClassVar[int]
        NAMED_MODEL_SECTION_INDEX_FIELD_NUMBER: _ClassVar[int]
        VENDOR_NAME_FIELD_NUMBER: _ClassVar[int]
        VENDOR_FIELD_NUMBER: _ClassVar[int]
        MODEL_PICKER_BADGES_FIELD_NUMBER: _ClassVar[int]
        name: str
        default_on: bool
        supports_agent: bool
        degradation_status: int
        tooltip_data: AvailableModelsResponse.TooltipData
        supports_thinking: bool
        supports_images: bool
        supports_max_mode: bool
        context_token_limit: int
        context_token_limit_for_max_mode: int
        client_display_name: str
        server_model_name: str
        supports_non_max_mode: bool
        tooltip_data_for_max_mode: AvailableModelsResponse.TooltipData
        is_recommended_for_background_composer: bool
        supports_plan_mode: bool
        inputbox_short_model_name: str
        supports_sandboxing: bool
        supports_cmd_k: bool
        parameter_definitions: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.ParameterDefinition]
        variants: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.Variant]
        legacy_slugs: _containers.RepeatedScalarFieldContainer[str]
        named_model_section_index: int
        vendor_name: str
        vendor: AvailableModelsResponse.Vendor
        model_picker_badges: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.PickerBadge]
        def __init__(self, name: _Optional[str] = ..., default_on: _Optional[bool] = ..., supports_agent: _Optional[bool] = ..., degradation_status: _Optional[int] = ..., tooltip_data: _Optional[_Union[AvailableModelsResponse.TooltipData, _Mapping]] = ..., supports_thinking: _Optional[bool] = ..., supports_images: _Optional[bool] = ..., supports_max_mode: _Optional[bool] = ..., context_token_limit: _Optional[int] = ..., context_token_limit_for_max_mode: _Optional[int] = ..., client_display_name: _Optional[str] = ..., server_model_name: _Optional[str] = ..., supports_non_max_mode: _Optional[bool] = ..., tooltip_data_for_max_mode: _Optional[_Union[AvailableModelsResponse.TooltipData, _Mapping]] = ..., is_recommended_for_background_composer: _Optional[bool] = ..., supports_plan_mode: _Optional[bool] = ..., inputbox_short_model_name: _Optional[str] = ..., supports_sandboxing: _Optional[bool] = ..., supports_cmd_k: _Optional[bool] = ..., parameter_definitions: _Optional[_Iterable[_Union[AvailableModelsResponse.ParameterDefinition, _Mapping]]] = ..., variants: _Optional[_Iterable[_Union[AvailableModelsResponse.Variant, _Mapping]]] = ..., legacy_slugs: _Optional[_Iterable[str]] = ..., named_model_section_index: _Optional[int] = ..., vendor_name: _Optional[str] = ..., vendor: _Optional[_Union[AvailableModelsResponse.Vendor, _Mapping]] = ..., model_picker_badges: _Optional[_Iterable[_Union[AvailableModelsResponse.PickerBadge, _Mapping]]] = ...) -> None: ...
    MODEL_NAMES_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    model_names: _containers.RepeatedScalarFieldContainer[str]
    models: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.AvailableModel]
    def __init__(self, model_names: _Optional[_Iterable[str]] = ..., models: _Optional[_Iterable[_Union[AvailableModelsResponse.AvailableModel, _Mapping]]] = ...) -> None: ...

class GetUsableModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetUsableModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_agent_v1_pb2.ModelDetails]
    def __init__(self, models: _Optional[_Iterable[_Union[_agent_v1_pb2.ModelDetails, _Mapping]]] = ...) -> None: ...

class GetDefaultModelForCliRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetDefaultModelForCliResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _agent_v1_pb2.ModelDetails
    def __init__(self, model: _Optional[_Union[_agent_v1_pb2.ModelDetails, _Mapping]] = ...) -> None: ...

class GetDefaultModelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetDefaultModelResponse(_message.Message):
    __slots__ = ("model", "thinking_model", "max_mode", "next_default_set_date")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THINKING_MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_MODE_FIELD_NUMBER: _ClassVar[int]
    NEXT_DEFAULT_SET_DATE_FIELD_NUMBER: _ClassVar[int]
    model: str
    thinking_model: str
    max_mode: bool
    next_default_set_date: str
    def __init__(self, model: _Optional[str] = ..., thinking_model: _Optional[str] = ..., max_mode: _Optional[bool] = ..., next_default_set_date: _Optional[str] = ...) -> None: ...

class GetDefaultModelNudgeDataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetDefaultModelNudgeDataResponse(_message.Message):
    __slots__ = ("nudge_date", "should_default_switch_on_new_chat", "models_with_no_default_switch", "conversion_model_override")
    NUDGE_DATE_FIELD_NUMBER: _ClassVar[int]
    SHOULD_DEFAULT_SWITCH_ON_NEW_CHAT_FIELD_NUMBER: _ClassVar[int]
    MODELS_WITH_NO_DEFAULT_SWITCH_FIELD_NUMBER: _ClassVar[int]
    CONVERSION_MODEL_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    nudge_date: str
    should_default_switch_on_new_chat: bool
    models_with_no_default_switch: _containers.RepeatedScalarFieldContainer[str]
    conversion_model_override: str
    def __init__(self, nudge_date: _Optional[str] = ..., should_default_switch_on_new_chat: _Optional[bool] = ..., models_with_no_default_switch: _Optional[_Iterable[str]] = ..., conversion_model_override: _Optional[str] = ...) -> None: ...
