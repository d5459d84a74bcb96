"""Content-addressed blobs: id = SHA-256, idempotent put, corruption detected (and repaired)."""
from __future__ import annotations

import hashlib

import pytest

from cursor_byok.store import BlobCorruptError, Store, blob_id_of


async def test_put_get_round_trip_and_idempotency(store: Store, raw_db) -> None:
    data = bytes(range(256)) * 64
    blob_id = await store.put_blob(data)
    assert blob_id == hashlib.sha256(data).digest() == blob_id_of(data)
    assert len(blob_id) == 32
    assert await store.put_blob(data) == blob_id
    assert await store.put_blob(bytearray(data)) == blob_id
    assert raw_db().execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 1
    assert await store.get_blob(blob_id) == data
    assert await store.has_blob(blob_id)
    assert await store.put_blob(b"") == hashlib.sha256(b"").digest()
    assert await store.get_blob(hashlib.sha256(b"").digest()) == b""


async def test_missing_blob(store: Store) -> None:
    absent = blob_id_of(b"never stored")
    assert await store.get_blob(absent) is None
    assert not await store.has_blob(absent)


async def test_corruption_is_detected_and_a_new_put_repairs_it(store: Store, raw_db) -> None:
    data = b"the original bytes"
    blob_id = await store.put_blob(data)
    raw_db().execute("UPDATE blobs SET data = ? WHERE blob_id = ?", (b"the 0riginal bytes", blob_id))
    with pytest.raises(BlobCorruptError) as caught:
        await store.get_blob(blob_id)
    assert caught.value.blob_id == blob_id
    assert await store.put_blob(data) == blob_id
    assert await store.get_blob(blob_id) == data
