-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- The previous schema (bench/scale-schemas/previous.sql: clustered by
-- key_hash) with the operator's listing index that it offered as an
-- option: what a deployment that lists keys ran before the table was
-- kept in expiry order.  Applied after mysql/schema.sql.

ALTER TABLE idempotency_keys
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (key_hash),
    DROP KEY uk_key_hash,
    ADD KEY ix_expires_at (expires_at);
