-- The demo backend's business tables (backend/withdraw.py): an account's
-- balance, and a record per withdrawal, written in one transaction with
-- the fence's marker (mysql/fence.sql), named by that marker and epoch so
-- that a retry after an answer was lost is answered from it (a find) with
-- the balance the first answer gave.

CREATE TABLE IF NOT EXISTS accounts (
    id           VARCHAR(64)      NOT NULL,
    balance      BIGINT           NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS withdrawals (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    account      VARCHAR(64)      NOT NULL,
    amount       BIGINT           NOT NULL,
    balance      BIGINT           NOT NULL,
    marker       BINARY(32)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL,
    created_at   DATETIME(3)      NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_marker (marker, epoch)
) ENGINE=InnoDB;

-- the demo's account (make run, demo/try.sh)
INSERT IGNORE INTO accounts VALUES ('alice', 1000);
