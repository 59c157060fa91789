-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- Candidate (b): the rows in the order they expire, the key's unique
-- index narrow and apart.
--
-- The table is clustered by (expires_at, key_hash): a claim's row is
-- appended where rows expiring now + ttl go, the last pages of the
-- index, and so is its response when the completion writes it; the
-- purge deletes a range at the head of the index.  The UNIQUE KEY on
-- key_hash stays the claim's decider: an INSERT IGNORE of a key that
-- exists is refused by it, as by today's primary key, and every
-- statement finds a key's row through it (key_hash and expires_at:
-- about 30 bytes an entry with a 16-byte hash, a tenth of a row, so
-- that the index a claim reads at random stays in the buffer pool).
-- The module's statements (common.sql) stay as they are: only the table
-- changes (a change of expires_at, by a takeover, moves the row).
-- ix_state_created serves the listing, in its order (created_at, then
-- key_hash, which no longer ends every entry by itself); its entries
-- are appended too.
--
-- bench/scale_schemas.py measures this file as it is ("timed", 16-byte
-- key and fingerprint hashes) and with 32-byte ones ("timed32", today's
-- hash: no change of the module's hashing).

CREATE TABLE sk_keys (
    key_hash     BINARY(16)       NOT NULL,
    state        TINYINT UNSIGNED NOT NULL DEFAULT 0,
    owner        BINARY(16)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL DEFAULT 1,
    fingerprint  BINARY(16)       NOT NULL,
    created_at   DATETIME(3)      NOT NULL,
    lease_until  DATETIME(3)      NOT NULL,
    expires_at   DATETIME(3)      NOT NULL,
    status       SMALLINT UNSIGNED NULL,
    response     LONGBLOB         NULL,
    PRIMARY KEY (expires_at, key_hash),
    UNIQUE KEY uk_key_hash (key_hash),
    KEY ix_state_created (state, created_at, key_hash)
) ENGINE=InnoDB DEFAULT CHARSET=binary;

DROP FUNCTION IF EXISTS sk_key;

DELIMITER //

-- filled key seq: a hash like any other (the clustered order is time)
CREATE FUNCTION sk_key(seq BIGINT UNSIGNED, n BIGINT UNSIGNED)
    RETURNS VARBINARY(32) DETERMINISTIC
    RETURN LEFT(UNHEX(SHA2(seq, 256)), @sk_hash_bytes) //

-- in the clustered order (expiry); the secondary indexes afterwards
CREATE PROCEDURE sk_fill(n BIGINT, backlog INT)
BEGIN
    SET @now = UTC_TIMESTAMP(3), @resp = REPEAT('r', @sk_response_bytes);
    ALTER TABLE sk_keys DROP INDEX uk_key_hash, DROP INDEX ix_state_created;
    INSERT INTO sk_keys (key_hash, state, owner, epoch, fingerprint,
        created_at, lease_until, expires_at, status, response)
    SELECT sk_key(seq, n), s.st, LEFT(UNHEX(MD5(seq)), 16),
           IF(s.st = 4, 2, 1), LEFT(UNHEX(SHA2('fp', 256)), @sk_hash_bytes),
           s.ex - INTERVAL 1 DAY, s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND,
           s.ex, IF(s.st = 1, 201, NULL), IF(s.st = 1, @resp, NULL)
    FROM (SELECT seq, sk_state(seq) AS st,
                 sk_expiry(seq, n, backlog, 1) AS ex
          FROM seq_1_to_1000000000 WHERE seq <= n) s;
    ALTER TABLE sk_keys ADD UNIQUE INDEX uk_key_hash (key_hash),
        ADD INDEX ix_state_created (state, created_at, key_hash);
END //

DELIMITER ;
