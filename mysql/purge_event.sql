-- ngx_http_idempotency_module: purge expired rows with a MySQL EVENT,
-- for operators who prefer the database to do it.  Then set
-- `purge=off` on the idempotency_store so that nginx does not purge too.
--
--   mariadb idempotency < mysql/purge_event.sql
--   SET GLOBAL event_scheduler = ON;   -- and event_scheduler=ON in my.cnf
--
-- The account needs the EVENT privilege on the schema; the event runs
-- with its definer's rights.  Each run deletes the expired rows in
-- batches of 1000, pausing 100 ms between full batches, so that a backlog
-- never turns into one long transaction.  Keys still in progress with a
-- live lease are never deleted, and neither is the purge-lease row that
-- nginx keeps (it expires in 9999).  Rename idempotency_keys if the store
-- uses table=.  On Galera, create the event on one node only.

DELIMITER ;;

CREATE EVENT IF NOT EXISTS idempotency_purge
    ON SCHEDULE EVERY 1 MINUTE
    ON COMPLETION PRESERVE
    COMMENT 'ngx_http_idempotency_module: delete expired keys'
DO
BEGIN
    DECLARE n INT DEFAULT 1000;

    WHILE n >= 1000 DO
        DELETE FROM idempotency_keys
        WHERE expires_at <= UTC_TIMESTAMP(3)
          AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3))
        ORDER BY expires_at
        LIMIT 1000;

        SET n = ROW_COUNT();

        IF n >= 1000 THEN
            DO SLEEP(0.1);
        END IF;
    END WHILE;
END;;

DELIMITER ;
