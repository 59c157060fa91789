-- ngx_http_idempotency_module: the key table.
--
-- One row per (scope, key).  The unique key on key_hash is the whole
-- guarantee: the database lets exactly one claim of a key succeed, and
-- every statement of the module finds its row through it.
--
-- The rows are kept in the order they expire (the primary key is
-- (expires_at, key_hash)), so that the cost of a claim does not grow with
-- the number of live keys (docs/operations.md, "Sizing"): a claim and
-- its completion write at the tail of the table (a new key expires last),
-- the purge deletes a range at its head, and the only pages a claim reads
-- at random are uk_key_hash's, about 70 bytes a live key, which the
-- buffer pool should hold.  A cold replay reads its row: one random page.
-- The module sets expires_at on a whole second, so that the keys of one
-- second lie in key_hash order and concurrent claims spread over its
-- pages instead of taking turns on the last one.
-- Times are UTC and always compared with the database's own clock.
--
-- state: 0 in progress (owner holds a lease), 1 completed (response
-- stored), 2 completed but the response could not be stored, 3 outcome
-- unknown (the request was sent upstream and no complete response came
-- back: never run again, never replayed; docs/design.md, "Outcomes"),
-- 4 released (given back by the module or an operator: nobody's, free
-- for the next claim, and kept with its epoch until expires_at), 5
-- executed by the backend's fence marker (idempotency_fence,
-- mysql/fence.sql: the outcome was unknown or the owner's lease ended,
-- and the backend's transaction had committed; response holds the
-- marker's short result reference, retries get 410 outcome-executed).
--
-- epoch: the claim's epoch, 1 for the first claim, one more for each
-- takeover and each reclaim after a release or after retention; a
-- backend that remembers the highest it has seen for a key can refuse a
-- stale executor (idempotency_epoch_header).
--
-- life: the token of the claim that began the key's current use (its
-- INSERT, or a claim after a release or after retention), which a fence's
-- marker names together with the epoch, so that the marker of an epoch is
-- never that of another use of the same key (after a purge, a forget, or
-- in another store that shares the marker table).  Written only where a
-- location fences the store's keys (idempotency_fence); NULL otherwise,
-- and for rows of earlier versions, whose markers are named by key_hash.
-- mysql/upgrade-life.sql adds it to an existing table, at once.
--
-- ix_state_created serves the operator's listing (idempotency_admin,
-- list=in_progress and list=unknown): the rows of one state, oldest
-- first, read up to the limit without a scan or a sort.  Its entries for
-- new claims and completions are appended too.
--
-- One row is not a key: the purge lease (key_hash of 32 zero bytes,
-- expires_at in 9999), which the nginx that purges expired rows holds
-- (docs/design.md, "Purge").

CREATE TABLE IF NOT EXISTS idempotency_keys (
    key_hash     BINARY(32)       NOT NULL,
    state        TINYINT UNSIGNED NOT NULL DEFAULT 0,
    owner        BINARY(16)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL DEFAULT 1,
    fingerprint  BINARY(32)       NOT NULL,
    created_at   DATETIME(3)      NOT NULL,
    lease_until  DATETIME(3)      NOT NULL,
    expires_at   DATETIME(3)      NOT NULL,
    status       SMALLINT UNSIGNED NULL,
    response     LONGBLOB         NULL,
    life         BINARY(16)       NULL,
    PRIMARY KEY (expires_at, key_hash),
    UNIQUE KEY uk_key_hash (key_hash),
    KEY ix_state_created (state, created_at, key_hash)
) ENGINE=InnoDB DEFAULT CHARSET=binary;

-- A table made by an earlier version works as it is, with the cost that
-- grows with its size; mysql/upgrade-expiry-order.sql turns it into the
-- one above online (docs/operations.md, "Upgrading the table").
