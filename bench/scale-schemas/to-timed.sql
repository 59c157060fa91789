-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- Today's table made into candidate (b) with its 32-byte hashes
-- (timed.sql, SCALE-DESIGN.md), online: InnoDB rebuilds the table while
-- claims, completions and reads go on (LOCK=NONE refuses to run rather
-- than block them); the metadata lock is taken for a moment at the start
-- and at the end.  bench/scale_schemas.py times it on today's table;
-- SCALE_TABLE_SQL=bench/scale-schemas/to-timed.sql makes make
-- bench-scale measure (b) through nginx (the module's statements are the
-- same).

ALTER TABLE idempotency_keys DROP PRIMARY KEY,
    ADD PRIMARY KEY (expires_at, key_hash),
    ADD UNIQUE KEY uk_key_hash (key_hash),
    DROP KEY ix_expires_at,
    ADD KEY ix_state_created (state, created_at, key_hash),
    ALGORITHM=INPLACE, LOCK=NONE;
