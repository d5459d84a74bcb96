"""The PostgreSQL text of the store's statements that have no spelling common to both backends,
keyed by their SQLite text (the very constants the store runs, so the two cannot drift apart).

Ids read from a JSON parameter are put in the C collation, as the tables' text columns are."""
from __future__ import annotations

from ..inbound import HAS_QUARANTINE, SELECT_INBOUND
from ..migrations import HAS_VERSION_TABLE
from ..ops import PROBE_BINDINGS, PROBE_EVENT_IDS, PROBE_SEQS
from ..retention import RULES

__all__ = ["OVERRIDES"]

_IDS = 'json_array_elements_text(%s::json) AS j(value)'

OVERRIDES: dict[str, str] = {
    PROBE_SEQS: f"""
SELECT j.value,
       (SELECT COALESCE(MAX(seq), 0) FROM history_events WHERE conversation_id = j.value COLLATE "C"),
       (SELECT COALESCE(MAX(seq), 0) FROM checkpoints WHERE conversation_id = j.value COLLATE "C")
FROM {_IDS}
""",
    PROBE_BINDINGS: f"""
SELECT b.request_id, b.conversation_id FROM request_bindings AS b
WHERE b.request_id = ANY(ARRAY(SELECT j.value COLLATE "C" FROM {_IDS}))
""",
    PROBE_EVENT_IDS: """
SELECT h.conversation_id, h.event_id, h.seq
FROM json_array_elements(%s::json) AS j(value)
JOIN history_events AS h
  ON h.conversation_id = (j.value->>0) COLLATE "C"
 AND h.event_id = (j.value->>1) COLLATE "C"
""",
    # No rowid: a generation's arrival is its first row's receipt time, then its place in the heap
    # (rows of one millisecond: inserted in order into a table that is emptied as streams end).
    SELECT_INBOUND: SELECT_INBOUND.replace(
        "SELECT rowid,",
        "SELECT ARRAY[received_at_ms, (ctid::text::point)[0]::bigint, (ctid::text::point)[1]::bigint],",
    ),
    HAS_QUARANTINE: "SELECT 1 WHERE to_regclass('quarantined_appends') IS NOT NULL",
    HAS_VERSION_TABLE: "SELECT 1 WHERE to_regclass('schema_version') IS NOT NULL",
}

# Retention picks rows by their physical id (ctid), re-checking the rule's condition when deleting.
for _rule in RULES.values():
    OVERRIDES[_rule.oldest()] = (
        f"SELECT ctid::text FROM {_rule.table} WHERE {_rule.condition} AND {_rule.age_column} < %s "
        f"ORDER BY {_rule.age_column} LIMIT %s"
    )
    OVERRIDES[_rule.delete()] = (
        f"DELETE FROM {_rule.table} WHERE ctid = ANY(ARRAY(SELECT j.value::tid FROM {_IDS})) AND {_rule.condition}"
    )
