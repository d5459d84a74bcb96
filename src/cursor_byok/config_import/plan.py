"""Turn candidates into an import plan against the existing config, and carry it out.

Existing model ids are never overwritten. Literal keys go to the secrets file (created 0600) under a
name the model refers to by `api_key_secret`; variable names become `api_key_env`. The config file
gets new `[[models]]` tables appended (its own text and comments stay as they are), and the result
is validated before anything is written.
"""
from __future__ import annotations

import enum
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from ..config import Config, ConfigError, parse, url_problem
from .formats import Candidate, ForeignConfig, SourceFormat

MASK = "********"


class Outcome(str, enum.Enum):
    IMPORTED = "imported"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ModelReport:
    id: str
    outcome: Outcome
    detail: str  # provider and model when imported, the reason when skipped
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class ImportPlan:
    source: Path
    format: SourceFormat
    config_path: Path
    secrets_path: Path
    tables: list[dict[str, Any]] = field(default_factory=list)  # new [[models]] tables
    secrets: dict[str, str] = field(default_factory=dict)  # new secret name -> key
    reports: list[ModelReport] = field(default_factory=list)

    @property
    def imported(self) -> int:
        return sum(r.outcome is Outcome.IMPORTED for r in self.reports)

    def config_toml(self) -> str:
        return "\n".join(_array_table(table) for table in self.tables)

    def secrets_toml(self, *, masked: bool) -> str:
        return tomli_w.dumps({name: MASK if masked else key for name, key in self.secrets.items()})


def _array_table(table: dict[str, Any]) -> str:
    """One `[[models]]` table. Rendered as the table `[models]` (tomli_w writes short tables in an
    array inline, as `models = [...]`, which cannot follow the config's own tables) whose first
    line becomes the array-of-tables header; sub-tables (`[models.extra_params]`) then belong to it."""
    return "[[models]]\n" + tomli_w.dumps({"models": table}).removeprefix("[models]\n")


def _secret_for(key: str, hint: str, known: dict[str, str]) -> str:
    """The secret name holding `key`: an existing one with the same value, else a free name."""
    for name, value in known.items():
        if value == key:
            return name
    name, n = hint, 1
    while name in known:
        n += 1
        name = f"{hint}-{n}"
    known[name] = key
    return name


def _table(candidate: Candidate, key_field: tuple[str, str] | None) -> dict[str, Any]:
    """Plain keys first (the key reference right after `model`), sub-tables last."""
    plain = {k: v for k, v in candidate.fields.items() if not isinstance(v, dict) and v != ""}
    tables = {k: v for k, v in candidate.fields.items() if isinstance(v, dict)}
    table: dict[str, Any] = {"id": candidate.id}
    for name, value in plain.items():
        table[name] = value
        if name == "model" and key_field is not None:
            table[key_field[0]] = key_field[1]
    return table | tables


def plan_import(
    foreign: ForeignConfig,
    source: Path,
    existing: Config,
    config_path: Path,
    secrets_path: Path,
    existing_secrets: dict[str, str],
) -> ImportPlan:
    plan = ImportPlan(source, foreign.format, config_path, secrets_path)
    configured = {m.id for m in existing.models}
    seen: set[str] = set()
    known = dict(existing_secrets)
    for candidate in foreign.candidates:
        skip = candidate.skip
        if not skip and not candidate.id:
            skip = "no name to make a model id from"
        elif not skip and candidate.id in configured:
            skip = "model id already configured"
        elif not skip and candidate.id in seen:
            skip = "same model id earlier in the file"
        elif not skip and (base_url := candidate.fields.get("base_url")) and (problem := url_problem(str(base_url))):
            skip = f"base URL {base_url!r} is {problem}"
        if skip:  # notes on what a model's import leaves out do not matter when it is skipped
            plan.reports.append(ModelReport(candidate.id or "?", Outcome.SKIPPED, skip))
            continue
        seen.add(candidate.id)
        key_field: tuple[str, str] | None = None
        if candidate.key is not None and candidate.key.env:
            key_field = ("api_key_env", candidate.key.env)
        elif candidate.key is not None:
            name = _secret_for(candidate.key.literal, candidate.secret_name, known)
            if name not in existing_secrets:
                plan.secrets[name] = candidate.key.literal
            key_field = ("api_key_secret", name)
        plan.tables.append(_table(candidate, key_field))
        detail = f"{candidate.fields['provider']} {candidate.fields['model']}"
        plan.reports.append(ModelReport(candidate.id, Outcome.IMPORTED, detail, tuple(candidate.notes)))
    return plan


def _joined(current: str, addition: str) -> str:
    if not current:
        return addition
    return (current if current.endswith("\n") else current + "\n") + "\n" + addition


def merged_config_text(plan: ImportPlan, current: str) -> str:
    """The config file after the import: its current text, then the new tables."""
    return _joined(current, f"# imported from {plan.source}\n{plan.config_toml()}") if plan.tables else current


def merged_secrets_text(plan: ImportPlan, current: str) -> str:
    return _joined(current, plan.secrets_toml(masked=False)) if plan.secrets else current


def validate(plan: ImportPlan, config_text: str, secrets_text: str) -> None:
    """Raise ConfigError unless both merged files load and hold everything new (nothing is
    written then)."""
    where = str(plan.config_path)
    try:
        merged = parse(tomllib.loads(merged_config_text(plan, config_text)), where)
        before = len(tomllib.loads(config_text).get("models", []))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: new [[models]] tables cannot be appended to this file ({exc}): add them by hand") from None
    if len(merged.models) != before + len(plan.tables):
        raise ConfigError(f"{where}: new [[models]] tables cannot be appended to this file: add them by hand")
    where = str(plan.secrets_path)
    try:
        stored = tomllib.loads(merged_secrets_text(plan, secrets_text))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: new keys cannot be appended to this file ({exc}): add them by hand") from None
    if any(stored.get(name) != key for name, key in plan.secrets.items()):
        raise ConfigError(f"{where}: new keys cannot be appended to this file: add them by hand")


def _replace(path: Path, text: str, mode: int) -> None:
    """Write `path` whole through a temporary file that has `mode` from its creation on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.import")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, mode)  # the umask may have taken bits away
    os.replace(tmp, path)


def apply(plan: ImportPlan, config_text: str, secrets_text: str) -> None:
    """Write the secrets (0600), then the config (keeping its mode)."""
    if plan.secrets:
        _replace(plan.secrets_path, merged_secrets_text(plan, secrets_text), 0o600)
    if plan.tables:
        mode = plan.config_path.stat().st_mode & 0o777 if plan.config_path.exists() else 0o644
        _replace(plan.config_path, merged_config_text(plan, config_text), mode)
