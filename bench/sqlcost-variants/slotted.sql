-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- mysql/schema.sql with 16 tails instead of one: the clustered index
-- led by the low 4 bits of the key's first byte, so that concurrent
-- claims and completions do not all write the same last pages.  A
-- DEFAULT expression fills the column, so the module's statements are
-- unchanged (a generated column cannot be in a primary key); the purge
-- would need "slot IN (...)" to range over it.  A question for
-- bench/sqlcost.sh, not a schema to run.

ALTER TABLE idempotency_keys
    ADD COLUMN slot TINYINT UNSIGNED NOT NULL
        DEFAULT (ASCII(key_hash) & 15) FIRST,
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (slot, expires_at, key_hash);
