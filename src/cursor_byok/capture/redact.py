"""What a capture keeps of a message, a header or a line of text.

By default a capture can be attached to a public bug report: credentials never survive (the
headers that carry them, every configured key, anything shaped like a key), and neither does
content (file contents, shell output, the user's and the model's text): every string and bytes
field is replaced by its length and a hash, except the fields that only name things (ids, tool
names), which are kept unless a secret hides in them. Unknown fields are listed by number and
size, their bytes dropped. `with_content` keeps the content and still removes every secret.

The raw bytes a capture keeps are the redacted message serialized again, never the bytes that
came over the wire (unless nothing had to be removed), so the raw part leaks nothing the JSON
does not.
"""
from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

__all__ = ["Redactor", "digest", "kind_of", "names_an_id"]

# Shapes of credentials seen in the wild: provider keys (sk-…, sk-ant-…, sk-proj-…), Cursor API
# keys, Google, GitHub, Slack and AWS keys, JWTs and bearer tokens.
SECRET_SHAPES = re.compile(
    r"(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"
    r"|key_[A-Za-z0-9]{16,}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*"
    r"|(?i:bearer)\s+\S+"
)
SECRET = "[redacted secret]"
# Headers whose value is a credential whatever it looks like.
CREDENTIAL_HEADER = re.compile(r"auth|cookie|token|secret|checksum|key|session|signature|password|x-cursor-byok-proxy", re.I)
# Fields that only name things: kept, as a redacted replay needs them to match what the server asks.
_NAMING_FIELDS = frozenset({"tool_name", "provider_identifier", "server_identifier", "type_url"})
_MAX_REMEMBERED_HEADERS = 4096


def names_an_id(name: str) -> bool:
    return name == "id" or name.endswith(("_id", "_ids"))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _placeholder(data: bytes) -> str:
    return f"[redacted {len(data)} bytes sha256:{digest(data)}]"


class Redactor:
    def __init__(self, secrets: Iterable[str], with_content: bool) -> None:
        # Longest first, so a key that contains another is removed whole.
        self._secrets = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)
        self.with_content = with_content
        self._headers: dict[tuple[bytes, bytes], tuple[str, str]] = {}  # headers repeat on every request

    @staticmethod
    def keeps(field: FieldDescriptor) -> bool:
        """Whether a redacted capture keeps this string or bytes field's value (secrets aside)."""
        return names_an_id(field.name) or field.name in _NAMING_FIELDS

    # -- text -----------------------------------------------------------------------------------------
    def has_secret(self, text: str) -> bool:
        return any(s in text for s in self._secrets) or SECRET_SHAPES.search(text) is not None

    def scrub(self, text: str) -> str:
        """`text` with every secret in it replaced."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, SECRET)
        return SECRET_SHAPES.sub(SECRET, text)

    def headers(self, headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
        return [self._header(header) for header in headers]

    def _header(self, header: tuple[bytes, bytes]) -> tuple[str, str]:
        kept = self._headers.get(header)
        if kept is None:
            key = header[0].decode("latin-1").lower()
            kept = (key, SECRET if CREDENTIAL_HEADER.search(key) else self.scrub(header[1].decode("latin-1")))
            if len(self._headers) >= _MAX_REMEMBERED_HEADERS:
                self._headers.clear()
            self._headers[header] = kept
        return kept

    def path(self, path: str) -> str:
        return self.scrub(path)

    # -- messages ---------------------------------------------------------------------------------------
    def frame(self, raw: bytes, message_type: type[Message]) -> dict[str, Any]:
        """One protobuf message as a capture keeps it: its kind, JSON through our protos, the
        unknown fields it held, and the (redacted) bytes."""
        try:
            message = message_type.FromString(raw)
        except DecodeError:
            return self.opaque(raw) | {"undecodable": message_type.DESCRIPTOR.full_name}
        unknown: list[dict[str, Any]] = []
        changed = self._walk(message, "", unknown)
        out: dict[str, Any] = {"kind": kind_of(message)}
        out["message"] = MessageToDict(message, preserving_proto_field_name=True)
        if unknown:
            out["unknown"] = unknown
        out["raw"] = base64.b64encode(message.SerializeToString() if changed else raw).decode()
        return out

    def opaque(self, data: bytes) -> dict[str, Any]:
        """Bytes of no known type: kept with content only, and only when no secret is in them."""
        out: dict[str, Any] = {"bytes": len(data), "sha256": digest(data)}
        if self.with_content and not self.has_secret(data.decode("utf-8", "replace")):
            out["raw"] = base64.b64encode(data).decode()
        return out

    def _walk(self, message: Message, at: str, unknown: list[dict[str, Any]]) -> bool:
        """Redact `message` in place; whether anything changed."""
        changed = self._unknown(message, at, unknown)
        for field, value in message.ListFields():
            where = f"{at}.{field.name}" if at else field.name
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                changed |= self._map(message, field, where, unknown)
            elif field.message_type is not None:
                for item in value if field.is_repeated else (value,):
                    changed |= self._walk(item, where, unknown)
            elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
                if field.is_repeated:
                    new = [self._leaf(field, item) for item in value]
                    if new != list(value):
                        del value[:]
                        value.extend(new)
                        changed = True
                else:
                    new_value = self._leaf(field, value)
                    if new_value != value:
                        setattr(message, field.name, new_value)
                        changed = True
        return changed

    def _map(self, message: Message, field: FieldDescriptor, where: str, unknown: list[dict[str, Any]]) -> bool:
        entries = getattr(message, field.name)
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        changed = False
        for key in list(entries):
            new_key = self._leaf(key_field, key) if key_field.type == FieldDescriptor.TYPE_STRING else key
            if value_field.message_type is not None:
                changed |= self._walk(entries[key], f"{where}[]", unknown)
                if new_key != key:
                    copy = type(entries[key])()
                    copy.CopyFrom(entries[key])
                    del entries[key]
                    entries[new_key].CopyFrom(copy)
                    changed = True
            else:
                value = entries[key]
                new_value = self._leaf(value_field, value) if value_field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES) else value
                if new_key != key or new_value != value:
                    del entries[key]
                    entries[new_key] = new_value
                    changed = True
        return changed

    def _leaf(self, field: FieldDescriptor, value: str | bytes) -> str | bytes:
        if not value:
            return value
        is_bytes = isinstance(value, bytes)
        text = value.decode("utf-8", "replace") if is_bytes else value
        if self.with_content or self.keeps(field):
            if not self.has_secret(text):
                return value
            if is_bytes:
                return SECRET.encode()
            return self.scrub(text)
        data = value if is_bytes else value.encode("utf-8")
        marker = _placeholder(data)
        return marker.encode() if is_bytes else marker

    def _unknown(self, message: Message, at: str, unknown: list[dict[str, Any]]) -> bool:
        fields = list(UnknownFieldSet(message))
        if not fields:
            return False
        keep = self.with_content and not any(
            isinstance(f.data, bytes) and self.has_secret(f.data.decode("utf-8", "replace")) for f in fields
        )
        for f in fields:
            entry: dict[str, Any] = {"at": at, "field": f.field_number, "wire_type": f.wire_type}
            if isinstance(f.data, bytes):
                entry["bytes"] = len(f.data)
                if keep:
                    entry["raw"] = base64.b64encode(f.data).decode()
            elif isinstance(f.data, int):
                entry["value"] = f.data
            unknown.append(entry)
        if keep:
            return False
        message.DiscardUnknownFields()
        return True


def kind_of(message: Message) -> str:
    """A message's kind for a person and a diff: the top oneof member, and the member set inside it
    (`interaction_update.text_delta`, `exec_server_message.read_args`, `run_request`)."""
    member = _member(message)
    if member is None:
        return "?" if _oneofs(message) else message.DESCRIPTOR.name
    inner = getattr(message, member)
    chosen = _member(inner) if isinstance(inner, Message) else None
    return f"{member}.{chosen}" if chosen is not None else member


_ONEOFS: dict[str, list[str]] = {}


def _oneofs(message: Message) -> list[str]:
    descriptor = message.DESCRIPTOR
    names = _ONEOFS.get(descriptor.full_name)
    if names is None:
        # a name starting with "_" is the synthetic oneof of a proto3 `optional` field
        names = _ONEOFS[descriptor.full_name] = [o.name for o in descriptor.oneofs if not o.name.startswith("_")]
    return names


def _member(message: Message) -> str | None:
    """The set member of the message's first set (non-synthetic) oneof, read generically from its
    fields (a label for any message: not a switch on a wire oneof, so not through protocol.which)."""
    oneofs = _oneofs(message)
    for field, _ in message.ListFields():
        if field.containing_oneof is not None and field.containing_oneof.name in oneofs:
            return field.name
    return None
