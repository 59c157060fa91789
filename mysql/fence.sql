-- ngx_http_idempotency_module: the fence's marker table (idempotency_fence).
--
-- It lives in the backend's own database, beside the business tables, so
-- that the backend's marker commits in the same transaction as its
-- business writes (docs/design.md, "Fence or find").  One row per (use
-- of a key, claim epoch), written by whichever of two writers gets there
-- first:
--
--   state 1  executed: the backend, as the FIRST statement of its business
--            transaction (INSERT; a duplicate-key error means the epoch
--            was fenced or already ran: roll back before any business
--            write, then read the row: 1, the epoch ran, answer from your
--            own records (a find, docs/design.md); 2, answer a 5xx).  It
--            may set result before COMMIT: a short reference to what it
--            made (a URI), which retries get in the module's 410
--            outcome-executed answer where no answer can be found.
--   state 2  fenced: the module, before it gives up on the epoch (an
--            unknown outcome, a dead owner's lease, a release): INSERT
--            IGNORE, then a read of the row.
--
-- The primary key's record lock decides every race: the fence waits for
-- a backend's uncommitted marker (at most half the store's query_timeout,
-- for its own statement only), and a backend's INSERT after a fence
-- fails.  Lock order in the backend: this row first, then the business
-- rows.  marker names one use of a key (hex in $idempotency_marker): a
-- key claimed anew after a purge or a forget, or the same key in another
-- store sharing this table, has another; epoch is the claim's
-- ($idempotency_epoch).  Markers written before lives (mysql/upgrade-*)
-- are named by the key hash, and stay valid for the keys claimed then.
--
-- The module's account needs SELECT and INSERT on this table; rows may be
-- deleted once the key's retention (idempotency_ttl) has ended, by
-- created_at: a marker's name never comes back, so a deleted one can only
-- matter to an execution that arrives after the key was forgotten.
-- mysql/upgrade-fence-marker.sql turns a table of the previous version
-- (column key_hash) into this one.

CREATE TABLE IF NOT EXISTS idempotency_fence (
    marker       BINARY(32)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL,
    state        TINYINT UNSIGNED NOT NULL,
    result       VARCHAR(1024)    NULL,
    created_at   DATETIME(3)      NOT NULL,
    PRIMARY KEY (marker, epoch),
    KEY ix_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary;
