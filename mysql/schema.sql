-- ngx_http_idempotency_module: the key table.
--
-- One row per (scope, key).  The primary key on key_hash is the whole
-- guarantee: the database lets exactly one claim of a key succeed.  Being
-- the primary key (not a UNIQUE key beside an AUTO_INCREMENT id), it is
-- also the one index a claim, a read and a completion touch: a duplicate
-- INSERT is refused before any row is written.
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
-- The operator's listing (idempotency_admin, list=in_progress and
-- list=unknown) wants an index that this table does not have by default,
-- ix_state_created (state, created_at), added by the ALTER at the end of
-- this file: without it a listing scans the table and sorts; with it, a
-- claim adds an entry and every completion moves it, which cost the
-- bench's first requests 10 % of their throughput and 12 us of MariaDB
-- CPU each (docs/operations.md, "The listing index").
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
    PRIMARY KEY (key_hash),
    KEY ix_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary;

-- A table made by an earlier version (an AUTO_INCREMENT id as its primary
-- key and a UNIQUE key on key_hash) works as it is; this turns it into
-- the one above, rebuilding the table:
--
--   ALTER TABLE idempotency_keys DROP COLUMN id, DROP INDEX uk_key_hash,
--       ADD PRIMARY KEY (key_hash);
--
-- A table made before the claim epoch (no epoch column) needs it; the
-- module's statements name it, so add it before upgrading the module:
--
--   ALTER TABLE idempotency_keys
--       ADD COLUMN epoch INT UNSIGNED NOT NULL DEFAULT 1 AFTER owner;
--
-- The listing index, for a deployment that lists keys on a large table
-- (docs/operations.md, "The listing index"), added online: InnoDB builds
-- it while claims, completions and reads go on (LOCK=NONE refuses to run
-- rather than block them); only the start and the end take the table's
-- metadata lock for a moment, so a long transaction on the table delays
-- them:
--
--   ALTER TABLE idempotency_keys
--       ADD INDEX ix_state_created (state, created_at),
--       ALGORITHM=INPLACE, LOCK=NONE;
