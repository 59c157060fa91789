-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- The previous schema's table (mysql/schema.sql before the rows were
-- kept in the order they expire): one row per key, clustered by the
-- key's SHA-256, the response inline, ix_expires_at for the purge.  A
-- claim's unique check reads a random leaf of the whole table.
--
-- `SCALE_SCHEMA=previous make bench-scale` measures it through nginx (the
-- module works with either table), and SCALE_MIGRATE=1 fills it and
-- times mysql/upgrade-expiry-order.sql; bench/scale_schemas.py loads it
-- as sk_keys (with previous-fill.sql) for the stored procedures.

DROP TABLE IF EXISTS idempotency_keys;
CREATE TABLE idempotency_keys (
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
