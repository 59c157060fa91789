-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- Candidate (a): a narrow key table, the responses apart.
--
-- sk_keys holds what a claim decides on: the key's hash (16 bytes, the
-- first half of today's SHA-256: SCALE-DESIGN.md has the collision
-- arithmetic), state, owner, epoch, fingerprint (16 bytes too), times,
-- status, and the id of its response.  Its primary key on key_hash stays
-- the claim's decider.  A row is about 100 bytes instead of about 420,
-- so four times as many keys share a page and the buffer pool.
--
-- sk_responses is clustered by an AUTO_INCREMENT id: every record is
-- appended at the end of the index, never into a random leaf.  A
-- completion appends the record and points the key's row at it, in one
-- transaction; a replay reads the key's row, then the record by id.
-- The purge deletes expired keys through ix_expires_at, and the records
-- they point to.  ix_state_created serves the listing.  The claim and
-- the listing are the module's (common.sql).

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
    response_id  BIGINT UNSIGNED  NULL,
    PRIMARY KEY (key_hash),
    KEY ix_expires_at (expires_at),
    KEY ix_state_created (state, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary;

CREATE TABLE sk_responses (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    response     LONGBLOB         NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=binary;

DROP PROCEDURE IF EXISTS sk_complete;
DROP PROCEDURE IF EXISTS sk_read;
DROP PROCEDURE IF EXISTS sk_purge;

DELIMITER //

-- the records first (id = seq), then the keys pointing at them, in key
-- order; the secondary indexes built afterwards, sorted
CREATE PROCEDURE sk_fill(n BIGINT, backlog INT)
BEGIN
    SET @now = UTC_TIMESTAMP(3), @resp = REPEAT('r', @sk_response_bytes);
    ALTER TABLE sk_keys DROP INDEX ix_expires_at,
        DROP INDEX ix_state_created;
    INSERT INTO sk_responses (id, response)
    SELECT seq, @resp FROM seq_1_to_1000000000
    WHERE seq <= n AND sk_state(seq) = 1;
    INSERT INTO sk_keys (key_hash, state, owner, epoch, fingerprint,
        created_at, lease_until, expires_at, status, response_id)
    SELECT sk_key(seq, n), s.st, LEFT(UNHEX(MD5(seq)), 16),
           IF(s.st = 4, 2, 1), LEFT(UNHEX(SHA2('fp', 256)), 16),
           s.ex - INTERVAL 1 DAY, s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND,
           s.ex, IF(s.st = 1, 201, NULL), IF(s.st = 1, seq, NULL)
    FROM (SELECT seq, sk_state(seq) AS st,
                 sk_expiry(seq, n, backlog, 0) AS ex
          FROM seq_1_to_1000000000 WHERE seq <= n) s;
    ALTER TABLE sk_keys ADD INDEX ix_expires_at (expires_at),
        ADD INDEX ix_state_created (state, created_at);
END //

-- the record appended, the key pointed at it: one transaction (a record
-- whose key's UPDATE matched nothing is rolled back with it)
CREATE PROCEDURE sk_complete(k VARBINARY(32), o BINARY(16), r BLOB)
BEGIN
    START TRANSACTION;
    INSERT INTO sk_responses (response) VALUES (r);
    UPDATE sk_keys SET state = 1, status = 201,
        lease_until = UTC_TIMESTAMP(3),
        expires_at = IF(expires_at <= UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)
            + INTERVAL TIMESTAMPDIFF(MICROSECOND, created_at, expires_at)
            MICROSECOND, expires_at),
        response_id = LAST_INSERT_ID()
    WHERE key_hash = k AND owner = o;
    IF ROW_COUNT() = 0 THEN
        ROLLBACK;
    ELSE
        COMMIT;
    END IF;
END //

CREATE PROCEDURE sk_read(kh VARBINARY(32))
    SELECT k.state, k.owner, k.status, k.epoch,
           IF(k.state = 1 AND k.expires_at > UTC_TIMESTAMP(3),
              r.response, NULL)
    INTO @st, @ow, @status, @epoch, @response
    FROM sk_keys k LEFT JOIN sk_responses r ON r.id = k.response_id
    WHERE k.key_hash = kh //

-- the oldest expired keys and their records
CREATE PROCEDURE sk_purge(batch INT)
BEGIN
    CREATE TEMPORARY TABLE IF NOT EXISTS sk_batch (
        key_hash BINARY(16) PRIMARY KEY, response_id BIGINT UNSIGNED)
        ENGINE=MEMORY;
    TRUNCATE TABLE sk_batch;
    INSERT INTO sk_batch SELECT key_hash, response_id FROM sk_keys
        WHERE expires_at <= UTC_TIMESTAMP(3)
        AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3))
        ORDER BY expires_at LIMIT batch;
    START TRANSACTION;
    DELETE k FROM sk_keys k JOIN sk_batch b USING (key_hash)
        WHERE k.expires_at <= UTC_TIMESTAMP(3)
        AND (k.state <> 0 OR k.lease_until <= UTC_TIMESTAMP(3));
    SET @purged = ROW_COUNT();
    DELETE r FROM sk_responses r JOIN sk_batch b ON r.id = b.response_id;
    COMMIT;
END //

DELIMITER ;
