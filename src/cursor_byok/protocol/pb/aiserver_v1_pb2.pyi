from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BidiAppendRequest(_message.Message):
    __slots__ = ("data", "request_id", "append_seqno", "data_binary")
    DATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_SEQNO_FIELD_NUMBER: _ClassVar[int]
    DATA_BINARY_FIELD_NUMBER: _ClassVar[int]
    data: str
    request_id: BidiRequestId
    append_seqno: int
    data_binary: bytes
    def __init__(self, data: _Optional[str] = ..., request_id: _Optional[_Union[BidiRequestId, _Mapping]] = ..., append_seqno: _Optional[int] = ..., data_binary: _Optional[bytes] = ...) -> None: ...

class BidiAppendResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BidiRequestId(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ClientAction(_message.Message):
    __slots__ = ("command_id", "args")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    args: _containers.ScalarMap[str, str]
    def __init__(self, command_id: _Optional[str] = ..., args: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ConfigureSpendLimitAction(_message.Message):
    __slots__ = ("confirm_label",)
    CONFIRM_LABEL_FIELD_NUMBER: _ClassVar[int]
    confirm_label: str
    def __init__(self, confirm_label: _Optional[str] = ...) -> None: ...

class CustomErrorDetails(_message.Message):
    __slots__ = ("title", "detail", "allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown", "is_retryable", "show_request_id", "should_show_immediate_error", "buttons", "additional_info", "plan_choices", "analytics_metadata")
    class AdditionalInfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ALLOW_COMMAND_LINKS_POTENTIALLY_UNSAFE_PLEASE_ONLY_USE_FOR_HANDWRITTEN_TRUSTED_MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    IS_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SHOW_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHOW_IMMEDIATE_ERROR_FIELD_NUMBER: _ClassVar[int]
    BUTTONS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_INFO_FIELD_NUMBER: _ClassVar[int]
    PLAN_CHOICES_FIELD_NUMBER: _ClassVar[int]
    ANALYTICS_METADATA_FIELD_NUMBER: _ClassVar[int]
    title: str
    detail: str
    allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown: bool
    is_retryable: bool
    show_request_id: bool
    should_show_immediate_error: bool
    buttons: _containers.RepeatedCompositeFieldContainer[ErrorButton]
    additional_info: _containers.ScalarMap[str, str]
    plan_choices: _containers.RepeatedCompositeFieldContainer[PlanChoice]
    analytics_metadata: ErrorAnalyticsMetadata
    def __init__(self, title: _Optional[str] = ..., detail: _Optional[str] = ..., allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown: _Optional[bool] = ..., is_retryable: _Optional[bool] = ..., show_request_id: _Optional[bool] = ..., should_show_immediate_error: _Optional[bool] = ..., buttons: _Optional[_Iterable[_Union[ErrorButton, _Mapping]]] = ..., additional_info: _Optional[_Mapping[str, str]] = ..., plan_choices: _Optional[_Iterable[_Union[PlanChoice, _Mapping]]] = ..., analytics_metadata: _Optional[_Union[ErrorAnalyticsMetadata, _Mapping]] = ...) -> None: ...

class DashboardAction(_message.Message):
    __slots__ = ("action", "args", "success_message")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    action: str
    args: _containers.ScalarMap[str, str]
    success_message: str
    def __init__(self, action: _Optional[str] = ..., args: _Optional[_Mapping[str, str]] = ..., success_message: _Optional[str] = ...) -> None: ...

class ErrorAnalyticsMetadata(_message.Message):
    __slots__ = ("action_required",)
    ACTION_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    action_required: str
    def __init__(self, action_required: _Optional[str] = ...) -> None: ...

class ErrorButton(_message.Message):
    __slots__ = ("label", "upgrade", "switch_model", "configure_spend_limit", "url", "upgrade_choice", "dashboard_action", "reload_window", "client_action")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_FIELD_NUMBER: _ClassVar[int]
    SWITCH_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONFIGURE_SPEND_LIMIT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_CHOICE_FIELD_NUMBER: _ClassVar[int]
    DASHBOARD_ACTION_FIELD_NUMBER: _ClassVar[int]
    RELOAD_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ACTION_FIELD_NUMBER: _ClassVar[int]
    label: str
    upgrade: UpgradeAction
    switch_model: SwitchModelAction
    configure_spend_limit: ConfigureSpendLimitAction
    url: UrlAction
    upgrade_choice: UpgradeChoice
    dashboard_action: DashboardAction
    reload_window: ReloadWindowAction
    client_action: ClientAction
    def __init__(self, label: _Optional[str] = ..., upgrade: _Optional[_Union[UpgradeAction, _Mapping]] = ..., switch_model: _Optional[_Union[SwitchModelAction, _Mapping]] = ..., configure_spend_limit: _Optional[_Union[ConfigureSpendLimitAction, _Mapping]] = ..., url: _Optional[_Union[UrlAction, _Mapping]] = ..., upgrade_choice: _Optional[_Union[UpgradeChoice, _Mapping]] = ..., dashboard_action: _Optional[_Union[DashboardAction, _Mapping]] = ..., reload_window: _Optional[_Union[ReloadWindowAction, _Mapping]] = ..., client_action: _Optional[_Union[ClientAction, _Mapping]] = ...) -> None: ...

class ErrorDetails(_message.Message):
    __slots__ = ("error", "details", "is_expected")
    class Error(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ERROR_UNSPECIFIED: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_API_KEY: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_USER_API_KEY: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_LOGGED_IN: _ClassVar[ErrorDetails.Error]
        ERROR_INVALID_AUTH_ID: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_HIGH_ENOUGH_PERMISSIONS: _ClassVar[ErrorDetails.Error]
        ERROR_AGENT_REQUIRES_LOGIN: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_MODEL_NAME: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_DEPRECATED: _ClassVar[ErrorDetails.Error]
        ERROR_USER_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_FREE_USER_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_FREE_USER_USAGE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_USAGE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_RESOURCE_EXHAUSTED: _ClassVar[ErrorDetails.Error]
        ERROR_AUTH_TOKEN_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_AUTH_TOKEN_EXPIRED: _ClassVar[ErrorDetails.Error]
        ERROR_OPENAI: _ClassVar[ErrorDetails.Error]
        ERROR_OPENAI_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_MAX_TOKENS: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_ONLY: _ClassVar[ErrorDetails.Error]
        ERROR_USER_ABORTED_REQUEST: _ClassVar[ErrorDetails.Error]
        ERROR_TIMEOUT: _ClassVar[ErrorDetails.Error]
        ERROR_GENERIC_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_CUSTOM_MESSAGE: _ClassVar[ErrorDetails.Error]
        ERROR_OUTDATED_CLIENT: _ClassVar[ErrorDetails.Error]
        ERROR_CLAUDE_IMAGE_TOO_LARGE: _ClassVar[ErrorDetails.Error]
        ERROR_FILE_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_API_KEY_RATE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_DEBOUNCED: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_REQUEST: _ClassVar[ErrorDetails.Error]
        ERROR_REPOSITORY_SERVICE_REPOSITORY_IS_NOT_INITIALIZED: _ClassVar[ErrorDetails.Error]
        ERROR_UNAUTHORIZED: _ClassVar[ErrorDetails.Error]
        ERROR_CONVERSATION_TOO_LONG: _ClassVar[ErrorDetails.Error]
        ERROR_USAGE_PRICING_REQUIRED: _ClassVar[ErrorDetails.Error]
        ERROR_USAGE_PRICING_REQUIRED_CHANGEABLE: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_NO_USER_CREDENTIALS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_USER_NO_ACCESS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_APP_NO_ACCESS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_MULTIPLE_OWNERS: _ClassVar[ErrorDetails.Error]
        ERROR_RATE_LIMITED: _ClassVar[ErrorDetails.Error]
        ERROR_RATE_LIMITED_CHANGEABLE: _ClassVar[ErrorDetails.Error]
        ERROR_CUSTOM: _ClassVar[ErrorDetails.Error]
        ERROR_HOOKS_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_SUSPICIOUS_USAGE_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_EXTENSION_HOST_TIMEOUT: _ClassVar[ErrorDetails.Error]
        ERROR_NETWORK_ERROR: _ClassVar[ErrorDetails.Error]
        ERROR_PROVIDER_ERROR: _ClassVar[ErrorDetails.Error]
        ERROR_MODEL_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_INTERNAL: _ClassVar[ErrorDetails.Error]
        ERROR_MAX_MODE_REQUIRED: _ClassVar[ErrorDetails.Error]
        ERROR_MODEL_NO_LONGER_SUPPORTED: _ClassVar[ErrorDetails.Error]
        ERROR_PRICING_WARNING: _ClassVar[ErrorDetails.Error]
        ERROR_SLOW_POOL: _ClassVar[ErrorDetails.Error]
        ERROR_UNSUPPORTED_REGION: _ClassVar[ErrorDetails.Error]
        ERROR_ACCOUNT_CLOSED: _ClassVar[ErrorDetails.Error]
    ERROR_UNSPECIFIED: ErrorDetails.Error
    ERROR_BAD_API_KEY: ErrorDetails.Error
    ERROR_BAD_USER_API_KEY: ErrorDetails.Error
    ERROR_NOT_LOGGED_IN: ErrorDetails.Error
    ERROR_INVALID_AUTH_ID: ErrorDetails.Error
    ERROR_NOT_HIGH_ENOUGH_PERMISSIONS: ErrorDetails.Error
    ERROR_AGENT_REQUIRES_LOGIN: ErrorDetails.Error
    ERROR_BAD_MODEL_NAME: ErrorDetails.Error
    ERROR_NOT_FOUND: ErrorDetails.Error
    ERROR_DEPRECATED: ErrorDetails.Error
    ERROR_USER_NOT_FOUND: ErrorDetails.Error
    ERROR_FREE_USER_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_PRO_USER_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_FREE_USER_USAGE_LIMIT: ErrorDetails.Error
    ERROR_PRO_USER_USAGE_LIMIT: ErrorDetails.Error
    ERROR_RESOURCE_EXHAUSTED: ErrorDetails.Error
    ERROR_AUTH_TOKEN_NOT_FOUND: ErrorDetails.Error
    ERROR_AUTH_TOKEN_EXPIRED: ErrorDetails.Error
    ERROR_OPENAI: ErrorDetails.Error
    ERROR_OPENAI_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_MAX_TOKENS: ErrorDetails.Error
    ERROR_PRO_USER_ONLY: ErrorDetails.Error
    ERROR_USER_ABORTED_REQUEST: ErrorDetails.Error
    ERROR_TIMEOUT: ErrorDetails.Error
    ERROR_GENERIC_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT: ErrorDetails.Error
    ERROR_CUSTOM_MESSAGE: ErrorDetails.Error
    ERROR_OUTDATED_CLIENT: ErrorDetails.Error
    ERROR_CLAUDE_IMAGE_TOO_LARGE: ErrorDetails.Error
    ERROR_FILE_NOT_FOUND: ErrorDetails.Error
    ERROR_API_KEY_RATE_LIMIT: ErrorDetails.Error
    ERROR_DEBOUNCED: ErrorDetails.Error
    ERROR_BAD_REQUEST: ErrorDetails.Error
    ERROR_REPOSITORY_SERVICE_REPOSITORY_IS_NOT_INITIALIZED: ErrorDetails.Error
    ERROR_UNAUTHORIZED: ErrorDetails.Error
    ERROR_CONVERSATION_TOO_LONG: ErrorDetails.Error
    ERROR_USAGE_PRICING_REQUIRED: ErrorDetails.Error
    ERROR_USAGE_PRICING_REQUIRED_CHANGEABLE: ErrorDetails.Error
    ERROR_GITHUB_NO_USER_CREDENTIALS: ErrorDetails.Error
    ERROR_GITHUB_USER_NO_ACCESS: ErrorDetails.Error
    ERROR_GITHUB_APP_NO_ACCESS: ErrorDetails.Error
    ERROR_GITHUB_MULTIPLE_OWNERS: ErrorDetails.Error
    ERROR_RATE_LIMITED: ErrorDetails.Error
    ERROR_RATE_LIMITED_CHANGEABLE: ErrorDetails.Error
    ERROR_CUSTOM: ErrorDetails.Error
    ERROR_HOOKS_BLOCKED: ErrorDetails.Error
    ERROR_SUSPICIOUS_USAGE_BLOCKED: ErrorDetails.Error
    ERROR_EXTENSION_HOST_TIMEOUT: ErrorDetails.Error
    ERROR_NETWORK_ERROR: ErrorDetails.Error
    ERROR_PROVIDER_ERROR: ErrorDetails.Error
    ERROR_MODEL_BLOCKED: ErrorDetails.Error
    ERROR_INTERNAL: ErrorDetails.Error
    ERROR_MAX_MODE_REQUIRED: ErrorDetails.Error
    ERROR_MODEL_NO_LONGER_SUPPORTED: ErrorDetails.Error
    ERROR_PRICING_WARNING: ErrorDetails.Error
    ERROR_SLOW_POOL: ErrorDetails.Error
    ERROR_UNSUPPORTED_REGION: ErrorDetails.Error
    ERROR_ACCOUNT_CLOSED: ErrorDetails.Error
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    error: ErrorDetails.Error
    details: CustomErrorDetails
    is_expected: bool
    def __init__(self, error: _Optional[_Union[ErrorDetails.Error, str]] = ..., details: _Optional[_Union[CustomErrorDetails, _Mapping]] = ..., is_expected: _Optional[bool] = ...) -> None: ...

class PlanChoice(_message.Message):
    __slots__ = ("label", "sublabel", "description", "value")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SUBLABEL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    label: str
    sublabel: str
    description: str
    value: str
    def __init__(self, label: _Optional[str] = ..., sublabel: _Optional[str] = ..., description: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ReloadWindowAction(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SwitchModelAction(_message.Message):
    __slots__ = ("suggested_model",)
    SUGGESTED_MODEL_FIELD_NUMBER: _ClassVar[int]
    suggested_model: str
    def __init__(self, suggested_model: _Optional[str] = ...) -> None: ...

class UpgradeAction(_message.Message):
    __slots__ = ("membership_to_upgrade_to", "try_immediate_upgrade", "allow_trial")
    MEMBERSHIP_TO_UPGRADE_TO_FIELD_NUMBER: _ClassVar[int]
    TRY_IMMEDIATE_UPGRADE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_TRIAL_FIELD_NUMBER: _ClassVar[int]
    membership_to_upgrade_to: str
    try_immediate_upgrade: bool
    allow_trial: bool
    def __init__(self, membership_to_upgrade_to: _Optional[str] = ..., try_immediate_upgrade: _Optional[bool] = ..., allow_trial: _Optional[bool] = ...) -> None: ...

class UpgradeChoice(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UrlAction(_message.Message):
    __slots__ = ("url",)
    URL_FIELD_NUMBER: _ClassVar[int]
    url: str
    def __init__(self, url: _Optional[str] = ...) -> None: ...
