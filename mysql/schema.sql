-- ngx_http_idempotency_module: the key table.
--
-- One row per (scope, key).  The UNIQUE key on key_hash is the whole
-- guarantee: the database lets exactly one claim of a key succeed.
-- Times are UTC and always compared with the database's own clock.
--
-- state: 0 in progress (owner holds a lease), 1 completed (response
-- stored), 2 completed but the response was too large to store.
--
-- One row is not a key: the purge lease (key_hash of 32 zero bytes,
-- expires_at in 9999), which the nginx that purges expired rows holds
-- (docs/design.md, "Purge").

CREATE TABLE IF NOT EXISTS idempotency_keys (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    key_hash     BINARY(32)       NOT NULL,
    state        TINYINT UNSIGNED NOT NULL DEFAULT 0,
    owner        BINARY(16)       NOT NULL,
    fingerprint  BINARY(32)       NOT NULL,
    created_at   DATETIME(3)      NOT NULL,
    lease_until  DATETIME(3)      NOT NULL,
    expires_at   DATETIME(3)      NOT NULL,
    status       SMALLINT UNSIGNED NULL,
    response     LONGBLOB         NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_key_hash (key_hash),
    KEY ix_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary;
