-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- The previous schema's table (mysql/schema.sql before the rows were
-- kept in the order they expire), made from today's empty table by
-- undoing mysql/upgrade-expiry-order.sql: one row per key, clustered by
-- the key's SHA-256, the response inline, ix_expires_at for the purge.
-- A claim's unique check reads a random leaf of the whole table.
--
-- Run after mysql/schema.sql: `SCALE_SCHEMA=previous make bench-scale`
-- measures it through nginx (the module works with either table),
-- SCALE_MIGRATE=1 fills it and times upgrade-expiry-order.sql, and
-- bench/scale_schemas.py loads it as sk_keys (with previous-fill.sql).

ALTER TABLE idempotency_keys
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (key_hash),
    DROP KEY uk_key_hash,
    DROP KEY ix_state_created,
    ADD KEY ix_expires_at (expires_at);
