-- ngx_http_idempotency_module: a fence marker table of the previous
-- version (its first column key_hash) made into today's (marker).
--
-- Markers used to be named by (key hash, epoch), and a key's epochs start
-- again at 1 once its row is purged: a new use of the key could find the
-- marker of an old one (a false "executed"), and two stores sharing the
-- table could find each other's.  Today a marker is named by the key's
-- life (SHA-256 of the key hash and the token of the claim that began
-- that use: $idempotency_marker), which never repeats.  The rows that
-- exist are kept as they are: their key_hash is the name of the keys
-- claimed before the upgrade, whose markers the module goes on naming by
-- the key hash (their row has no life).
--
-- Deploy in this order, each step before the next:
--   1. the keys table: mysql/upgrade-life.sql (instant);
--   2. this rename (instant on MariaDB 10.5 and MySQL 8.0 or later);
--   3. the backend: it inserts its marker into column "marker", with the
--      value nginx sends from $idempotency_marker instead of
--      $idempotency_key_hash (change the proxy_set_header line);
--   4. nginx with this module, on every host that fences the keys.
-- Between 2 and 3 a backend that still names key_hash fails its marker
-- insert and so its transaction: the key is released (a 5xx) and runs
-- when retried, never twice.  Between 3 and 4 an older nginx fences the
-- key hash, which the backend no longer writes: do 3 and 4 in the same
-- window, or stop the older nginx first.
-- Rename the table below if yours is not idempotency_fence.

ALTER TABLE idempotency_fence
    CHANGE COLUMN key_hash marker BINARY(32) NOT NULL;
