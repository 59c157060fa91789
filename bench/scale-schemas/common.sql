-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- make bench-scale's schema prototypes (bench/scale_schemas.py): what
-- every candidate shares.  bench/scale_schemas.py loads this file, then
-- the candidate's table (mysql/schema.sql and previous.sql for the
-- previous schema) and its file (previous-fill.sql, narrow.sql,
-- timed.sql), which makes sk_fill and replaces
-- what it does otherwise:
--
--   sk_fill(n, backlog)     n live keys, in the clustered index's order;
--                           sk_key(seq, n) is the hash of filled key seq
--   sk_claim(k, owner)      the module's claim: INSERT IGNORE of a new key
--   sk_complete(k, owner, response)
--                           the completion of a claim with its record
--   sk_read(k)              a replay's read of a key, with its response
--   sk_purge(batch)         one purge batch; sets @purged
--   sk_list()               the operator's listing of keys in progress
--
-- Below, those of today's module (ngx_http_idempotency_sql.c), which
-- today's schema and candidate (b) run as they are.  Every statement
-- runs in its own transaction (autocommit), as the module's do.  Hashes
-- are @sk_hash_bytes long, records @sk_response_bytes.

DROP TABLE IF EXISTS sk_keys, sk_responses;
DROP FUNCTION IF EXISTS sk_state;
DROP FUNCTION IF EXISTS sk_key;
DROP FUNCTION IF EXISTS sk_expiry;
DROP PROCEDURE IF EXISTS sk_fill;
DROP PROCEDURE IF EXISTS sk_claim;
DROP PROCEDURE IF EXISTS sk_complete;
DROP PROCEDURE IF EXISTS sk_read;
DROP PROCEDURE IF EXISTS sk_purge;
DROP PROCEDURE IF EXISTS sk_list;
DROP PROCEDURE IF EXISTS sk_pairs;
DROP PROCEDURE IF EXISTS sk_replays;
DROP PROCEDURE IF EXISTS sk_purge_all;

DELIMITER //

-- the state of filled key seq: 90 % completed, 4 % in progress (a lease
-- long dead), 3 % unknown, 3 % released (make bench-scale's mix)
CREATE FUNCTION sk_state(seq BIGINT UNSIGNED) RETURNS TINYINT DETERMINISTIC
    RETURN CASE WHEN seq % 100 < 90 THEN 1 WHEN seq % 100 < 94 THEN 0
                WHEN seq % 100 < 97 THEN 3 ELSE 4 END //

-- filled key seq of n: its first 8 bytes seq / (n + 1) of the key
-- space, so that keys 1 .. n are in key order and spread evenly
CREATE FUNCTION sk_key(seq BIGINT UNSIGNED, n BIGINT UNSIGNED)
    RETURNS VARBINARY(32) DETERMINISTIC
    RETURN LEFT(CONCAT(UNHEX(LPAD(HEX(seq * (18446744073709551615 DIV
                                             (n + 1))), 16, '0')),
                       UNHEX(SHA2(seq, 256))), @sk_hash_bytes) //

-- when filled key seq expires: spread over 24 h from `backlog` s ago, in
-- the order of seq (ordered) or not
CREATE FUNCTION sk_expiry(seq BIGINT UNSIGNED, n BIGINT UNSIGNED,
                          backlog INT, ordered INT)
    RETURNS DATETIME(3) DETERMINISTIC
    RETURN @now - INTERVAL backlog SECOND
           + INTERVAL IF(ordered, seq * 86400000 DIV n,
                         seq * 7919 % 86400000) * 1000 MICROSECOND //

CREATE PROCEDURE sk_claim(k VARBINARY(32), o BINARY(16))
    INSERT IGNORE INTO sk_keys (key_hash, state, owner, fingerprint,
        created_at, lease_until, expires_at)
    VALUES (k, 0, o, LEFT(UNHEX(SHA2('fp', 256)), @sk_hash_bytes),
            UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 30 SECOND,
            UTC_TIMESTAMP() + INTERVAL 1 SECOND + INTERVAL 86400 SECOND) //

CREATE PROCEDURE sk_complete(k VARBINARY(32), o BINARY(16), r BLOB)
    UPDATE sk_keys SET state = 1, status = 201,
        lease_until = UTC_TIMESTAMP(3),
        expires_at = IF(expires_at <= UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)
            + INTERVAL TIMESTAMPDIFF(MICROSECOND, created_at, expires_at)
            MICROSECOND, expires_at),
        response = r
    WHERE key_hash = k AND owner = o //

CREATE PROCEDURE sk_read(k VARBINARY(32))
    SELECT state, owner, status, epoch,
           IF(state = 1 AND expires_at > UTC_TIMESTAMP(3), response, NULL)
    INTO @st, @ow, @status, @epoch, @response
    FROM sk_keys WHERE key_hash = k //

CREATE PROCEDURE sk_purge(batch INT)
BEGIN
    DELETE FROM sk_keys WHERE expires_at <= UTC_TIMESTAMP(3)
        AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3))
        ORDER BY expires_at LIMIT batch;
    SET @purged = ROW_COUNT();
END //

-- the module's listing (ngx_http_idempotency_sql_admin_list)
CREATE PROCEDURE sk_list()
    SELECT COUNT(*), MAX(created_at) INTO @listed, @last FROM (
        SELECT key_hash, created_at FROM sk_keys
        WHERE state = 0 AND expires_at > UTC_TIMESTAMP(3)
        ORDER BY created_at, key_hash LIMIT 100) l //

-- n claim + completion pairs of fresh random keys
CREATE PROCEDURE sk_pairs(n INT)
BEGIN
    DECLARE i INT DEFAULT 0;
    DECLARE k VARBINARY(32);
    DECLARE o BINARY(16);
    DECLARE r BLOB DEFAULT REPEAT('r', @sk_response_bytes);
    WHILE i < n DO
        SET k = RANDOM_BYTES(@sk_hash_bytes), o = RANDOM_BYTES(16);
        CALL sk_claim(k, o);
        CALL sk_complete(k, o, r);
        SET i = i + 1;
    END WHILE;
END //

-- n reads of random filled keys (of the `filled` filled ones)
CREATE PROCEDURE sk_replays(n INT, filled BIGINT)
BEGIN
    DECLARE i INT DEFAULT 0;
    WHILE i < n DO
        CALL sk_read(sk_key(1 + FLOOR(RAND() * filled), filled));
        SET i = i + 1;
    END WHILE;
END //

-- the purge's batches one after the other until one is not full: the
-- rows removed in @sk_purged
CREATE PROCEDURE sk_purge_all(batch INT)
BEGIN
    SET @sk_purged = 0, @purged = batch;
    WHILE @purged >= batch DO
        CALL sk_purge(batch);
        SET @sk_purged = @sk_purged + @purged;
    END WHILE;
END //

DELIMITER ;
