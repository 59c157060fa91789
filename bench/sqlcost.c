
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * bench/sqlcost.c: mariadbd CPU per request of the module's statements.
 *
 * Runs the statements the module sends, from THREADS blocking clients,
 * against a MariaDB with the table of mysql/schema.sql, and prints the
 * server's CPU time (utime + stime of its pid) per request.  A tool for
 * choosing statements, not part of `make bench`; docs/design.md quotes
 * its figures.
 *
 *   make bench-sqlcost                      (the services' MariaDB)
 *   build/sqlcost MODE THREADS REQUESTS PORT PIDFILE [BATCH]
 *
 * MODE:
 *   text-claim-new   the claim of commit a594832 (one multi-statement
 *   text-claim-dup   INSERT .. ON DUPLICATE KEY UPDATE; SELECT), for a
 *                    new key / a key that exists
 *   claim-new        the prepared INSERT IGNORE of a new key
 *   claim-dup        the same for a key that exists, then its READ
 *   read-dup         the prepared READ (point SELECT) of a key that exists
 *   read-batch       the same, BATCH keys to a statement
 *   first            INSERT, then the completion UPDATE (300-byte record)
 *   first-batch      the same, BATCH requests to a statement each
 *
 * Environment: SQLCOST_RETAIN=ms, retention to the millisecond (the
 * claim before whole-second retention); SQLCOST_KEEP=lease, a late
 * answer kept in lease_until (below).
 *
 * Needs the account idem / idem-secret on database idempotency (as
 * scripts/services.sh makes it).  It empties the table.
 */


#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#define SQLCOST_KEYS    1000      /* completed keys, for the "dup" modes */
#define SQLCOST_RECORD  300
#define SQLCOST_BATCH   64


static const char     *mode;
static int             nthreads, nreq, port, batch = 16;
static const char     *pidfile;
static unsigned char   keys[SQLCOST_KEYS][32];
static unsigned char   record[SQLCOST_RECORD];
static unsigned char   fp[32] = { 1, 2, 3 };
static long long       lease_us = 30000000, ttl = 86400, status = 201;
static long long       done_state = 1;


#define COLS  "(key_hash, state, owner, fingerprint, created_at, " \
              "lease_until, expires_at)"

static const char  text_claim[] =
    "INSERT INTO idempotency_keys " COLS " VALUES (%s, 0, %s, %s, "
    "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 30000000 MICROSECOND, "
    "UTC_TIMESTAMP(3) + INTERVAL 86400 SECOND) ON DUPLICATE KEY UPDATE "
    "owner = IF(@idem_take := CASE WHEN expires_at <= UTC_TIMESTAMP(3) "
    "AND (state <> 0 OR lease_until <= UTC_TIMESTAMP(3)) THEN 1 "
    "WHEN state = 0 AND lease_until <= UTC_TIMESTAMP(3) "
    "AND fingerprint = %s THEN 2 ELSE 0 END, VALUES(owner), owner), "
    "state = IF(@idem_take, 0, state), "
    "fingerprint = IF(@idem_take, VALUES(fingerprint), fingerprint), "
    "created_at = IF(@idem_take = 1, VALUES(created_at), created_at), "
    "lease_until = IF(@idem_take, VALUES(lease_until), lease_until), "
    "expires_at = IF(@idem_take = 1, VALUES(expires_at), expires_at), "
    "status = IF(@idem_take, NULL, status), "
    "response = IF(@idem_take, NULL, response); "
    "SELECT state, owner = %s, fingerprint = %s, "
    "GREATEST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at), 0), "
    "@idem_take, status, IF(fingerprint = %s, response, NULL) "
    "FROM idempotency_keys WHERE key_hash = %s AND ROW_COUNT() <> 1";

/* the module's claim, its retention ending on a whole second; with
 * SQLCOST_RETAIN=ms the one before it, to the millisecond */
static const char  claim_row_second[] =
    "(?, 0, ?, ?, UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
    "UTC_TIMESTAMP() + INTERVAL 1 SECOND + INTERVAL ? SECOND)";

static const char  claim_row_ms[] =
    "(?, 0, ?, ?, UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
    "UTC_TIMESTAMP(3) + INTERVAL ? SECOND)";

static const char  *claim_row = claim_row_second;

static const char  read_sql[] =
    "SELECT key_hash, state, owner, fingerprint, "
    "GREATEST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at), 0), "
    "(state = 4 OR expires_at <= UTC_TIMESTAMP(3) AND (state <> 0 "
    "OR lease_until <= UTC_TIMESTAMP(3))), "
    "state = 0 AND lease_until <= UTC_TIMESTAMP(3), status, epoch, "
    "IF(state = 5 OR state = 1 AND expires_at > UTC_TIMESTAMP(3) "
    "AND IFNULL(fingerprint IN (";

/*
 * The completion's "keep an answer after retention" assignment: the
 * module's, which moves expires_at (a column of every index, so that a
 * batch's UPDATE runs in two passes, "Using buffer"), or with
 * SQLCOST_KEEP=lease one that keeps the answer in lease_until instead
 * and changes no index column (measured, not adopted: bench/NOTES.md,
 * "Keeping a late answer in lease_until")
 */
static const char  keep_expires[] =
    "lease_until = UTC_TIMESTAMP(3), "
    "expires_at = IF(expires_at <= UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL TIMESTAMPDIFF(MICROSECOND, "
    "created_at, expires_at) MICROSECOND, expires_at)";

static const char  keep_lease[] =
    "lease_until = IF(expires_at <= UTC_TIMESTAMP(3), "
    "UTC_TIMESTAMP(3) + INTERVAL TIMESTAMPDIFF(MICROSECOND, "
    "created_at, expires_at) MICROSECOND, UTC_TIMESTAMP(3))";

static const char  *keep = keep_expires;


static void
die(const char *what, const char *err)
{
    fprintf(stderr, "sqlcost: %s: %s\n", what, err);
    exit(1);
}


static void
hex(char *p, const unsigned char *s, size_t n)
{
    size_t             i;
    static const char  digits[] = "0123456789ABCDEF";

    *p++ = 'X';
    *p++ = '\'';

    for (i = 0; i < n; i++) {
        *p++ = digits[s[i] >> 4];
        *p++ = digits[s[i] & 15];
    }

    *p++ = '\'';
    *p = '\0';
}


static void
fill(unsigned char *p, size_t n, unsigned *seed)
{
    while (n--) {
        *p++ = (unsigned char) rand_r(seed);
    }
}


static MYSQL *
connect_db(void)
{
    MYSQL  *m;

    m = mysql_init(NULL);

    if (mysql_real_connect(m, "127.0.0.1", "idem", "idem-secret",
                           "idempotency", port, NULL,
                           CLIENT_MULTI_STATEMENTS) == NULL)
    {
        die("connect", mysql_error(m));
    }

    return m;
}


static void
query(MYSQL *m, const char *sql)
{
    MYSQL_RES  *res;

    if (mysql_real_query(m, sql, strlen(sql)) != 0) {
        die("query", mysql_error(m));
    }

    do {
        res = mysql_store_result(m);
        if (res) {
            mysql_free_result(res);
        }
    } while (mysql_next_result(m) == 0);
}


static MYSQL_STMT *
prepare(MYSQL *m, const char *sql)
{
    MYSQL_STMT  *s;

    s = mysql_stmt_init(m);

    if (mysql_stmt_prepare(s, sql, strlen(sql)) != 0) {
        die("prepare", mysql_stmt_error(s));
    }

    return s;
}


static void
bytes(MYSQL_BIND *b, const void *p, unsigned long *len)
{
    memset(b, 0, sizeof(MYSQL_BIND));
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *) p;
    b->length = len;
}


static void
num(MYSQL_BIND *b, long long *v)
{
    memset(b, 0, sizeof(MYSQL_BIND));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}


static my_ulonglong
execute(MYSQL_STMT *s, MYSQL_BIND *b)
{
    if (mysql_stmt_bind_param(s, b) != 0 || mysql_stmt_execute(s) != 0) {
        die("execute", mysql_stmt_error(s));
    }

    if (mysql_stmt_field_count(s)) {
        mysql_stmt_store_result(s);
        mysql_stmt_free_result(s);
    }

    return mysql_stmt_affected_rows(s);
}


/* the text of n claims (0), completions (1) or reads (2), to a statement */

static char *
batch_sql(int what, int n)
{
    int    i;
    char  *t, *p;

    t = malloc(4096 + 256 * n);
    p = t;

    if (what == 2) {
        p += sprintf(p, "%s", read_sql);

        for (i = 0; i < n; i++) {
            p += sprintf(p, "%s?", i ? ", " : "");
        }

        p += sprintf(p, "), 1), response, NULL) FROM idempotency_keys "
                     "WHERE key_hash IN (");

        for (i = 0; i < n; i++) {
            p += sprintf(p, "%s?", i ? ", " : "");
        }

        sprintf(p, ")");

        return t;
    }

    if (what == 0) {
        p += sprintf(p, "INSERT IGNORE INTO idempotency_keys " COLS
                     " VALUES ");

        for (i = 0; i < n; i++) {
            p += sprintf(p, "%s%s", i ? ", " : "", claim_row);
        }

        return t;
    }

    p += sprintf(p, "UPDATE idempotency_keys SET %s, state = CASE key_hash",
                 keep);
    for (i = 0; i < n; i++) {
        p += sprintf(p, " WHEN ? THEN ?");
    }

    p += sprintf(p, " END, status = CASE key_hash");
    for (i = 0; i < n; i++) {
        p += sprintf(p, " WHEN ? THEN ?");
    }

    p += sprintf(p, " END, response = CASE key_hash");
    for (i = 0; i < n; i++) {
        p += sprintf(p, " WHEN ? THEN ?");
    }

    p += sprintf(p, " END WHERE key_hash IN (");
    for (i = 0; i < n; i++) {
        p += sprintf(p, "%s?", i ? ", " : "");
    }

    p += sprintf(p, ") AND CASE key_hash");
    for (i = 0; i < n; i++) {
        p += sprintf(p, " WHEN ? THEN owner = ?");
    }

    sprintf(p, " END");

    return t;
}


static void *
client(void *arg)
{
    int             i, j, x, n;
    char           *sql, kh[70], ow[40], fh[70];
    MYSQL          *m;
    MYSQL_BIND     *b;
    MYSQL_STMT     *ins, *rd, *upd, *bins, *bupd;
    unsigned        seed;
    unsigned long   klen = 32, olen = 16, flen = 32, rlen = SQLCOST_RECORD;
    unsigned char   k[SQLCOST_BATCH][32], o[SQLCOST_BATCH][16];

    seed = (unsigned) (size_t) arg * 7919 + (unsigned) time(NULL);
    m = connect_db();
    sql = malloc(65536);
    b = calloc(9 * SQLCOST_BATCH, sizeof(MYSQL_BIND));

    ins = prepare(m, batch_sql(0, 1));
    rd = prepare(m, batch_sql(2, 1));
    sprintf(sql, "UPDATE idempotency_keys SET state = ?, status = ?, %s, "
            "response = ? WHERE key_hash = ? AND owner = ?", keep);
    upd = prepare(m, sql);
    bins = NULL;
    bupd = NULL;

    if (strcmp(mode, "first-batch") == 0) {
        bins = prepare(m, batch_sql(0, batch));
        bupd = prepare(m, batch_sql(1, batch));
    }

    if (strcmp(mode, "read-batch") == 0) {
        bins = prepare(m, batch_sql(2, batch));
    }

    hex(fh, fp, 32);

    for (i = 0; i < nreq; i += n) {
        n = 1;

        if (strstr(mode, "dup")) {
            memcpy(k[0], keys[rand_r(&seed) % SQLCOST_KEYS], 32);

        } else {
            fill(k[0], 32, &seed);
        }

        fill(o[0], 16, &seed);

        if (strncmp(mode, "text-claim", 10) == 0) {
            hex(kh, k[0], 32);
            hex(ow, o[0], 16);
            sprintf(sql, text_claim, kh, ow, fh, fh, ow, fh, fh, kh);
            query(m, sql);
            continue;
        }

        if (strcmp(mode, "read-dup") == 0) {
            bytes(&b[0], fp, &flen);
            bytes(&b[1], k[0], &klen);
            execute(rd, b);
            continue;
        }

        if (strcmp(mode, "read-batch") == 0) {
            n = batch;

            for (j = 0; j < n; j++) {
                memcpy(k[j], keys[rand_r(&seed) % SQLCOST_KEYS], 32);
                bytes(&b[j], fp, &flen);
                bytes(&b[n + j], k[j], &klen);
            }

            execute(bins, b);
            continue;
        }

        if (strcmp(mode, "first-batch") != 0) {
            bytes(&b[0], k[0], &klen);
            bytes(&b[1], o[0], &olen);
            bytes(&b[2], fp, &flen);
            num(&b[3], &lease_us);
            num(&b[4], &ttl);

            if (execute(ins, b) == 0) {
                bytes(&b[0], fp, &flen);
                bytes(&b[1], k[0], &klen);
                execute(rd, b);
            }

            if (strcmp(mode, "first") == 0) {
                num(&b[0], &done_state);
                num(&b[1], &status);
                bytes(&b[2], record, &rlen);
                bytes(&b[3], k[0], &klen);
                bytes(&b[4], o[0], &olen);
                execute(upd, b);
            }

            continue;
        }

        n = batch;

        for (j = 0; j < n; j++) {
            fill(k[j], 32, &seed);
            fill(o[j], 16, &seed);
            bytes(&b[5 * j], k[j], &klen);
            bytes(&b[5 * j + 1], o[j], &olen);
            bytes(&b[5 * j + 2], fp, &flen);
            num(&b[5 * j + 3], &lease_us);
            num(&b[5 * j + 4], &ttl);
        }

        execute(bins, b);

        x = 0;

        for (j = 0; j < n; j++) {
            bytes(&b[x++], k[j], &klen);
            num(&b[x++], &done_state);
        }

        for (j = 0; j < n; j++) {
            bytes(&b[x++], k[j], &klen);
            num(&b[x++], &status);
        }

        for (j = 0; j < n; j++) {
            bytes(&b[x++], k[j], &klen);
            bytes(&b[x++], record, &rlen);
        }

        for (j = 0; j < n; j++) {
            bytes(&b[x++], k[j], &klen);
        }

        for (j = 0; j < n; j++) {
            bytes(&b[x++], k[j], &klen);
            bytes(&b[x++], o[j], &olen);
        }

        execute(bupd, b);
    }

    mysql_close(m);

    return NULL;
}


static long
server_cpu(long pid)
{
    int    i;
    long   ut, st;
    char   path[64], buf[1024], *p;
    FILE  *f;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);

    f = fopen(path, "r");
    if (f == NULL || fgets(buf, sizeof(buf), f) == NULL) {
        die("read", path);
    }

    fclose(f);

    /* utime and stime are fields 14 and 15, after the ")" of comm */
    p = strrchr(buf, ')') + 2;

    for (i = 0; i < 11; i++) {
        p = strchr(p, ' ') + 1;
    }

    sscanf(p, "%ld %ld", &ut, &st);

    return ut + st;
}


int
main(int argc, char **argv)
{
    int              i;
    long             pid, c0, c1;
    char             sql[2048], kh[70], fh[70], rh[2 * SQLCOST_RECORD + 4];
    FILE            *f;
    MYSQL           *m;
    double           secs;
    unsigned         seed;
    pthread_t        t[256];
    struct timespec  a, z;

    if (argc < 6) {
        fprintf(stderr, "usage: sqlcost MODE THREADS REQUESTS PORT PIDFILE "
                        "[BATCH]\n");
        return 2;
    }

    if (getenv("SQLCOST_KEEP") && strcmp(getenv("SQLCOST_KEEP"), "lease")
                                   == 0)
    {
        keep = keep_lease;
    }

    if (getenv("SQLCOST_RETAIN") && strcmp(getenv("SQLCOST_RETAIN"), "ms")
                                    == 0)
    {
        claim_row = claim_row_ms;
    }

    mode = argv[1];
    nthreads = atoi(argv[2]);
    nreq = atoi(argv[3]);
    port = atoi(argv[4]);
    pidfile = argv[5];

    if (argc > 6) {
        batch = atoi(argv[6]);
    }

    if (nthreads < 1 || nthreads > 256 || batch < 1 || batch > SQLCOST_BATCH)
    {
        die("arguments", "1-256 threads, batch 1-64");
    }

    f = fopen(pidfile, "r");
    if (f == NULL || fscanf(f, "%ld", &pid) != 1) {
        die("pid file", pidfile);
    }

    fclose(f);

    mysql_library_init(0, NULL, NULL);

    for (i = 0; i < SQLCOST_RECORD; i++) {
        record[i] = (unsigned char) i;
    }

    /* completed keys for the "dup" modes */

    m = connect_db();
    query(m, "DELETE FROM idempotency_keys");

    seed = 42;
    hex(fh, fp, 32);
    hex(rh, record, SQLCOST_RECORD);

    for (i = 0; i < SQLCOST_KEYS; i++) {
        fill(keys[i], 32, &seed);
        hex(kh, keys[i], 32);
        snprintf(sql, sizeof(sql), "INSERT INTO idempotency_keys " COLS
                 " VALUES (%s, 1, X'00000000000000000000000000000000', %s, "
                 "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), "
                 "UTC_TIMESTAMP(3) + INTERVAL 1 DAY)", kh, fh);
        query(m, sql);
    }

    snprintf(sql, sizeof(sql), "UPDATE idempotency_keys SET status = 201, "
             "response = %s", rh);
    query(m, sql);
    mysql_close(m);

    c0 = server_cpu(pid);
    clock_gettime(CLOCK_MONOTONIC, &a);

    for (i = 0; i < nthreads; i++) {
        pthread_create(&t[i], NULL, client, (void *) (size_t) i);
    }

    for (i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
    }

    clock_gettime(CLOCK_MONOTONIC, &z);
    c1 = server_cpu(pid);

    secs = (z.tv_sec - a.tv_sec) + (z.tv_nsec - a.tv_nsec) / 1e9;

    printf("%-16s batch %2d: %6.1f us of mariadbd CPU per request, "
           "%6.0f requests/s\n", mode, strstr(mode, "batch") ? batch : 1,
           (c1 - c0) * 1e6 / sysconf(_SC_CLK_TCK) / ((double) nthreads * nreq),
           nthreads * nreq / secs);

    return 0;
}
