-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- The previous schema: the table of previous.sql (bench/scale_schemas.py
-- loads it as sk_keys before this file) and the module's statements
-- (common.sql).  One row per key, its response inline, clustered by the
-- key's SHA-256: a claim's unique check reads a random leaf of the whole
-- table, the completion makes that row 300 bytes wider, the purge
-- deletes in random leaves, the listing scans the table (without the
-- operator's ix_state_created).

DELIMITER //

-- in key order; the secondary index built afterwards, sorted, as a bulk
-- load does (filled row by row, each entry would be a random write)
CREATE PROCEDURE sk_fill(n BIGINT, backlog INT)
BEGIN
    SET @now = UTC_TIMESTAMP(3), @resp = REPEAT('r', @sk_response_bytes);
    ALTER TABLE sk_keys DROP INDEX ix_expires_at;
    INSERT INTO sk_keys (key_hash, state, owner, epoch, fingerprint,
        created_at, lease_until, expires_at, status, response)
    SELECT sk_key(seq, n), s.st, LEFT(UNHEX(MD5(seq)), 16),
           IF(s.st = 4, 2, 1), UNHEX(SHA2('fp', 256)),
           s.ex - INTERVAL 1 DAY, s.ex - INTERVAL 1 DAY + INTERVAL 30 SECOND,
           s.ex, IF(s.st = 1, 201, NULL), IF(s.st = 1, @resp, NULL)
    FROM (SELECT seq, sk_state(seq) AS st,
                 sk_expiry(seq, n, backlog, 0) AS ex
          FROM seq_1_to_1000000000 WHERE seq <= n) s;
    ALTER TABLE sk_keys ADD INDEX ix_expires_at (expires_at);
END //

DELIMITER ;
