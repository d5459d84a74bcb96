"""Developer tokens: 256 random bits, URL-safe (the same token works as a header and as the
`/_token/<token>/` path prefix), kept only as their SHA-256. A plain hash suffices: a token is
random, not a password, so there is nothing to guess from its digest. Pure."""
from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh token (43 characters), shown once by `users add` and never stored."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: bytes) -> str:
    """What the store keeps of a token, and what a presented one is looked up by (hex)."""
    return hashlib.sha256(token).hexdigest()
