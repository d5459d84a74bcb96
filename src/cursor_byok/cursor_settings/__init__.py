"""Editing Cursor's User/settings.json so the IDE uses our proxy (and undoing it exactly)."""
from __future__ import annotations

from . import jsonc
from .jsonc import JsoncError
from .settings import (
    BACKUP_FILE_NAME,
    MANAGED_KEYS,
    PROXY_KEY,
    PROXY_SUPPORT_VALUES,
    CursorSettings,
    EnableRecord,
    IntegrationState,
    SettingsError,
    SettingsStatus,
    default_settings_path,
    desired_values,
    enable_record,
    is_loopback_proxy,
)

__all__ = [
    "BACKUP_FILE_NAME",
    "MANAGED_KEYS",
    "PROXY_KEY",
    "PROXY_SUPPORT_VALUES",
    "CursorSettings",
    "EnableRecord",
    "IntegrationState",
    "JsoncError",
    "SettingsError",
    "SettingsStatus",
    "default_settings_path",
    "desired_values",
    "enable_record",
    "is_loopback_proxy",
    "jsonc",
]
