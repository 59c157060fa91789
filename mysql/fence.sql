-- ngx_http_idempotency_module: the fence's marker table (idempotency_fence).
--
-- It lives in the backend's own database, beside the business tables, so
-- that the backend's marker commits in the same transaction as its
-- business writes (docs/design.md, "Fence or find").  One row per (key,
-- claim epoch), written by whichever of two writers gets there first:
--
--   state 1  executed: the backend, as the FIRST statement of its business
--            transaction (INSERT; a duplicate-key error means the epoch
--            was fenced or already ran: roll back before any business
--            write).  It may set result before COMMIT: a short reference
--            to what it made (a URI), which retries get in the module's
--            410 outcome-executed answer.
--   state 2  fenced: the module, before it gives up on the epoch (an
--            unknown outcome, a dead owner's lease): INSERT IGNORE, then
--            a read of the row.
--
-- The primary key's record lock decides every race: the fence waits for
-- a backend's uncommitted marker (at most its innodb_lock_wait_timeout,
-- which it sets below the store's query_timeout), and a backend's INSERT
-- after a fence fails.  Lock order in the backend: this row first, then
-- the business rows.  key_hash is the keys table's (hex in
-- $idempotency_key_hash), epoch the claim's ($idempotency_epoch).
--
-- The module's account needs SELECT and INSERT on this table; rows may be
-- deleted once the key's retention (idempotency_ttl) has ended, by
-- created_at.

CREATE TABLE IF NOT EXISTS idempotency_fence (
    key_hash     BINARY(32)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL,
    state        TINYINT UNSIGNED NOT NULL,
    result       VARCHAR(1024)    NULL,
    created_at   DATETIME(3)      NOT NULL,
    PRIMARY KEY (key_hash, epoch),
    KEY ix_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary;
