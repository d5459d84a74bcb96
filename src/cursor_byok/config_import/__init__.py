"""Import model settings from other tools (`cursor-byok config import`): read, plan, write."""
from __future__ import annotations

from .formats import ForeignConfig, SourceError, SourceFormat, parse_foreign, read_foreign_config
from .plan import MASK, ImportPlan, ModelReport, Outcome, apply, merged_config_text, plan_import, validate

__all__ = [
    "MASK",
    "ForeignConfig",
    "ImportPlan",
    "ModelReport",
    "Outcome",
    "SourceError",
    "SourceFormat",
    "apply",
    "merged_config_text",
    "parse_foreign",
    "plan_import",
    "read_foreign_config",
    "validate",
]
