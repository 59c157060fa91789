-- ngx_http_idempotency_module: the key table's "life" column
-- (idempotency_fence, docs/operations.md "Upgrading the table").
--
-- A store whose keys a location fences needs it before nginx runs this
-- version of the module: its claims write the column, and without it
-- they fail ("the table is missing or has the wrong columns").  A store
-- that no location fences needs nothing.  Rows that exist keep NULL: their
-- fence markers go on being named by their key hash, as before, and a key
-- claimed after the upgrade names them by its life.
--
-- A column added at the end of the row: MariaDB 10.3 and MySQL 8.0.12
-- or later add it instantly (no copy of the table, whatever its size).
-- On Galera, run it once on any node (DDL replicates in total order).
-- Rename the table below if yours is not idempotency_keys.

ALTER TABLE idempotency_keys
    ADD COLUMN IF NOT EXISTS life BINARY(16) NULL, ALGORITHM=INSTANT;
