# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""The withdrawal of backend/app.py (--bank-db): a business transaction
that takes part in the module's fence (docs/design.md, "Fence or find").

    POST /withdraw?account=A&amount=N[&delay=MS|&hold=MS]   (HTTP only;
                                           any path ending in /withdraw)
    GET  /accounts/A                       the balance and the withdrawals

The request carries the marker of the key's use (header
Idempotency-Marker, 64 hex digits: $idempotency_marker) and its claim
epoch (Idempotency-Epoch: $idempotency_epoch). In one MariaDB
transaction, in this order (the lock order: the marker row first, then
the business rows):

    INSERT INTO idempotency_fence (marker, epoch, state 1 = executed)
    UPDATE accounts SET balance = balance - N ... (refused below 0)
    INSERT INTO withdrawals (..., marker, epoch)
    UPDATE idempotency_fence SET result = '/withdrawals/<id>'
    COMMIT

A duplicate marker means that the epoch was fenced by nginx, or already
ran: the transaction is rolled back before any business write, and the
marker's row says which.  Ran (1): the withdrawal of that marker and
epoch is answered as it was the first time, 201 with the same body (the
seed's duplicate branch: nginx asks for it with Idempotency-Attempt:
find after its fence found the epoch executed, and stores the answer);
404 .../no-record if there is none.  Fenced (2): 503 .../fenced, a
status the module does not store: should the request's nginx still wait
for it (an owner whose lease had ended but who was alive), the key is
released and the next retry runs it at a new epoch; usually nobody waits
(its nginx gave up on it).
Answers: 201 {"withdrawal":ID,"account":A,"amount":N,"balance":B,
"epoch":E} with Location /withdrawals/ID; 422 .../insufficient-funds
(rolled back, marker included); 400 without the two headers; 503 on a
database error. Tables: mysql/fence.sql and backend/withdraw.sql.

Test hooks, in a request header (X-Withdraw-Hook: die=marker, or
pause=MS&pause_at=marker), so that a retry without it is the same request
to the module (its fingerprint covers the URI, not the headers):
die=before|marker|commit SIGKILLs the backend before its transaction,
after the marker's INSERT (uncommitted), or after COMMIT before the
answer; pause=MS with pause_at=before|marker|commit (default before)
sleeps there; lose=commit answers 503 after COMMIT, as an app does whose
commit's answer was lost.  Each hook logs a line "withdraw: <hook> at
<where> marker=<hex> epoch=<E>" first, for tests to wait on.  The
query's delay=MS sleeps before the transaction, hold=MS after the marker (holding its lock) and
linger=MS after COMMIT, and lose=commit answers 503 after COMMIT, for
every attempt alike (the fault harness's slow and lossy operations; a
find commits nothing, so it neither lingers nor loses).
"""

import json
import os
import signal
import time

ER_DUP_ENTRY = 1062


def problem(status, kind, title, detail):
    body = (json.dumps({
        "type": "https://example.invalid/problems/" + kind,
        "title": title,
        "status": status,
        "detail": detail,
    }, separators=(",", ":")) + "\n").encode()
    return status, [("Content-Type", "application/problem+json")], body, kind


class Bank:
    """The withdrawal's database: pymysql, one connection a request."""

    def __init__(self, args, log):
        import pymysql          # Debian's python3-pymysql (scripts/deps.sh)
        self.pymysql = pymysql
        self.log = log
        self.conn_args = {
            "user": args.bank_user,
            "password": args.bank_password or "",
            "database": args.bank_db,
            "autocommit": False,
            "connect_timeout": 5,
        }
        if args.bank_socket:
            self.conn_args["unix_socket"] = args.bank_socket
        else:
            self.conn_args["host"] = args.bank_host
            self.conn_args["port"] = args.bank_port
        self.table = args.fence_table
        self.marker_header = args.marker_header
        self.epoch_header = args.epoch_header

    def hook(self, params, where, kh, epoch):
        if params.get("die") == where:
            self.log("withdraw: die at %s marker=%s epoch=%d"
                     % (where, kh, epoch))
            os.kill(os.getpid(), signal.SIGKILL)
        if "pause" in params and params.get("pause_at", "before") == where:
            self.log("withdraw: pause at %s marker=%s epoch=%d"
                     % (where, kh, epoch))
            time.sleep(int(params["pause"]) / 1000.0)
            self.log("withdraw: resume at %s marker=%s epoch=%d"
                     % (where, kh, epoch))

    def account(self, account):
        """(status, headers, body, note) of GET /accounts/A."""
        conn = self.pymysql.connect(**self.conn_args)
        try:
            cur = conn.cursor()
            cur.execute("SELECT balance FROM accounts WHERE id = %s",
                        (account,))
            row = cur.fetchone()
            cur.execute("SELECT id, amount, epoch FROM withdrawals "
                        "WHERE account = %s ORDER BY id", (account,))
            ws = [{"withdrawal": i, "amount": a, "epoch": e}
                  for i, a, e in cur.fetchall()]
            conn.rollback()
        finally:
            conn.close()
        if row is None:
            return problem(404, "no-account", "No such account", account)
        body = (json.dumps({"account": account, "balance": int(row[0]),
                            "withdrawals": ws},
                           separators=(",", ":")) + "\n").encode()
        return 200, [("Content-Type", "application/json")], body, "account"

    def answer(self, headers, params, parse):
        """(status, headers, body, note) of one withdrawal; parse: the
        query string parser, for the hook header."""
        kh = (headers.get(self.marker_header) or "").strip().lower()
        try:
            epoch = int((headers.get(self.epoch_header) or "").strip())
        except ValueError:
            epoch = 0
        if len(kh) != 64 or epoch < 1:
            return problem(400, "no-fence", "No marker or epoch",
                           "%s and %s are required"
                           % (self.marker_header, self.epoch_header))
        try:
            account = params.get("account", "acct-1")
            amount = int(params.get("amount", "10"))
        except ValueError:
            return problem(400, "bad-amount", "Bad amount", "not a number")

        hooks = parse(headers.get("X-Withdraw-Hook") or "")
        for slow, where in (("delay", "before"), ("hold", "marker"),
                            ("linger", "commit")):
            if slow in params and "pause" not in hooks:
                hooks.update(pause=params[slow], pause_at=where)
        if params.get("lose") == "commit":
            hooks.setdefault("lose", "commit")
        self.hook(hooks, "before", kh, epoch)
        try:
            return self.transaction(hooks, kh, epoch, account, amount)
        except self.pymysql.err.MySQLError as e:
            self.log("withdraw: marker=%s epoch=%d: database error %s"
                     % (kh, epoch, e))
            return problem(503, "database", "Database error", str(e))

    def transaction(self, params, kh, epoch, account, amount):
        conn = self.pymysql.connect(**self.conn_args)
        try:
            cur = conn.cursor()
            conn.begin()
            try:
                cur.execute("INSERT INTO `%s` (marker, epoch, state, "
                            "created_at) VALUES (UNHEX(%%s), %%s, 1, "
                            "UTC_TIMESTAMP(3))" % self.table, (kh, epoch))
            except self.pymysql.err.IntegrityError as e:
                if e.args[0] != ER_DUP_ENTRY:
                    raise
                conn.rollback()
                return self.duplicate(cur, kh, epoch)

            self.hook(params, "marker", kh, epoch)

            cur.execute("UPDATE accounts SET balance = balance - %s "
                        "WHERE id = %s AND balance >= %s",
                        (amount, account, amount))
            if cur.rowcount != 1:
                conn.rollback()
                return problem(422, "insufficient-funds",
                               "Insufficient funds",
                               "account %s cannot pay %d" % (account, amount))

            cur.execute("SELECT balance FROM accounts WHERE id = %s",
                        (account,))
            balance = cur.fetchone()[0]
            cur.execute("INSERT INTO withdrawals (account, amount, balance, "
                        "marker, epoch, created_at) VALUES (%s, %s, %s, "
                        "UNHEX(%s), %s, UTC_TIMESTAMP(3))",
                        (account, amount, balance, kh, epoch))
            wid = cur.lastrowid
            ref = "/withdrawals/%d" % wid
            cur.execute("UPDATE `%s` SET result = %%s WHERE marker = "
                        "UNHEX(%%s) AND epoch = %%s" % self.table,
                        (ref, kh, epoch))
            conn.commit()
        finally:
            conn.close()

        self.log("withdraw: marker=%s epoch=%d committed %s"
                 % (kh, epoch, ref))
        self.hook(params, "commit", kh, epoch)
        if params.get("lose") == "commit":
            # the commit's answer lost on its way (a connection to the
            # database cut after COMMIT was sent): the app says it failed
            return problem(503, "database", "Database error",
                           "the commit's answer was lost")

        return self.withdrawn(wid, account, amount, balance, epoch)

    @staticmethod
    def withdrawn(wid, account, amount, balance, epoch):
        """The answer to a withdrawal, the first time and to a find."""
        body = (json.dumps({"withdrawal": wid, "account": account,
                            "amount": amount, "balance": int(balance),
                            "epoch": epoch},
                           separators=(",", ":")) + "\n").encode()
        return 201, [("Content-Type", "application/json"),
                     ("Location", "/withdrawals/%d" % wid)], body, \
            "withdraw %d" % wid

    def duplicate(self, cur, kh, epoch):
        """The marker of this epoch is there (rolled back meanwhile): it
        ran, and its withdrawal is answered as the first time; or nginx
        fenced it, and it never runs."""
        cur.execute("SELECT state FROM `%s` WHERE marker = UNHEX(%%s) AND "
                    "epoch = %%s" % self.table, (kh, epoch))
        row = cur.fetchone()
        if row is None or row[0] != 1:
            self.log("withdraw: marker=%s epoch=%d is fenced or ran: "
                     "rolled back" % (kh, epoch))
            return problem(503, "fenced", "Epoch fenced",
                           "epoch %d of this key was fenced" % epoch)
        cur.execute("SELECT id, account, amount, balance FROM withdrawals "
                    "WHERE marker = UNHEX(%s) AND epoch = %s", (kh, epoch))
        w = cur.fetchone()
        cur.connection.rollback()
        if w is None:
            self.log("withdraw: marker=%s epoch=%d ran, no record"
                     % (kh, epoch))
            return problem(404, "no-record", "No record",
                           "epoch %d of this key ran; its record is gone"
                           % epoch)
        self.log("withdraw: marker=%s epoch=%d ran: answered from its "
                 "record (find)" % (kh, epoch))
        return self.withdrawn(w[0], w[1], w[2], w[3], epoch)
