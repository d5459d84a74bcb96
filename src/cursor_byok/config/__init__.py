"""Configuration: one TOML file, validated into msgspec Structs; secrets only by env var or 0600 file.

The keys in ARCHITECTURE.md's public contract are stable; unknown keys and wrong types are errors
that name the key. The shape is in `schema`, its validation in `checks`, the files in `files`.
"""
from __future__ import annotations

from .checks import parse, store_url_problem, url_problem
from .files import (
    config_path,
    default_config_path,
    enable_proxy_in_file,
    load,
    load_secrets,
    read_toml_text,
    resolve_api_key,
    secrets_path,
)
from .schema import (
    APP_NAME,
    CONFIG_ENV,
    DEFAULT_UPSTREAM,
    LOG_LEVELS,
    AliasConfig,
    ClusterConfig,
    Config,
    ConfigError,
    ModelConfig,
    ModelPrice,
    ObservabilityConfig,
    ProviderKind,
    ProxyConfig,
    RetentionConfig,
    StoreConfig,
    ServerConfig,
    TeamConfig,
    UpstreamConfig,
)

__all__ = [
    "APP_NAME",
    "CONFIG_ENV",
    "DEFAULT_UPSTREAM",
    "LOG_LEVELS",
    "AliasConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ModelConfig",
    "ModelPrice",
    "ObservabilityConfig",
    "ProviderKind",
    "ProxyConfig",
    "RetentionConfig",
    "StoreConfig",
    "ServerConfig",
    "TeamConfig",
    "UpstreamConfig",
    "config_path",
    "default_config_path",
    "enable_proxy_in_file",
    "load",
    "load_secrets",
    "parse",
    "read_toml_text",
    "resolve_api_key",
    "secrets_path",
    "store_url_problem",
    "url_problem",
]
