-- ngx_http_idempotency_module: a key table made by an earlier schema.sql
-- (primary key key_hash, index ix_expires_at) made into today's (rows in
-- the order they expire, UNIQUE KEY uk_key_hash, ix_state_created), online.
--
-- The module works with either table, unchanged, so this may run while
-- it serves (docs/operations.md, "Upgrading the table"):
--
-- - LOCK=NONE: InnoDB rebuilds the table while claims, completions,
--   replays and the purge go on; the statement fails rather than block
--   them.  The writes made meanwhile are kept in the online log
--   (innodb_online_alter_log_max_size, 128 MiB by default, about 14
--   minutes of 200 first requests a second); a rebuild that outgrows it
--   fails and is run again with a larger one.
-- - The table's metadata lock is taken for a moment at the start and at
--   the end.  Each waits for the transactions open on the table, and
--   statements on the table queue behind it while it waits: run it when
--   no long transaction (a backup's, a report's) holds the table.
-- - It needs free disk for a second copy of the table while it runs.
-- - A table that already has ix_state_created (added for the listing)
--   drops it first: add "DROP KEY ix_state_created," before ADD KEY.
--
-- A table made before the claim epoch (no epoch column) needs it first:
--
--   ALTER TABLE idempotency_keys
--       ADD COLUMN epoch INT UNSIGNED NOT NULL DEFAULT 1 AFTER owner;
--
-- A table made by the first versions (an AUTO_INCREMENT id as its primary
-- key and a UNIQUE key on key_hash): add "DROP COLUMN id, DROP KEY
-- uk_key_hash," at the start of the statement below.

ALTER TABLE idempotency_keys
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (expires_at, key_hash),
    ADD UNIQUE KEY uk_key_hash (key_hash),
    DROP KEY ix_expires_at,
    ADD KEY ix_state_created (state, created_at, key_hash),
    ALGORITHM=INPLACE, LOCK=NONE;
