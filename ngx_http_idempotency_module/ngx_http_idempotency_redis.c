
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the Redis replay tier.
 *
 * hiredis' async context driven by nginx events through a small adapter
 * (addRead, delRead, addWrite, delWrite, cleanup).  The library owns the
 * socket: our ngx_connection_t only wraps the fd for the event loop
 * (ngx_http_idempotency_conn.c) and is given back, never closed, from
 * the library's cleanup hook, after which the library closes the fd.
 *
 * hiredis 0.14 has no timers: the connect and the handshake (AUTH,
 * SELECT, PING) are bounded by a timer of the connection, each op by its
 * own, all redis_timeout.  An op that times out means a hung server: the
 * connection is freed, which makes the library call every pending reply
 * callback with a NULL reply.  The op a callback points to therefore
 * lives until the library owes it nothing (op->replies), whatever became
 * of the request that started it.
 *
 * Outages: the first failure logs one error line and marks Redis down.
 * Until a probe connection (connect, handshake, PING) succeeds, ops fail
 * at once.  Probes are made on demand, at most one at a time, with a
 * backoff from 100 ms doubling to 5 s; the first success logs "reachable
 * again".  A connection the server closes while idle (a restart, its
 * "timeout" setting) is simply made again on next use.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "ngx_http_idempotency_conn.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_redis.h"


#define NGX_HTTP_IDEMPOTENCY_REDIS_NONE         0
#define NGX_HTTP_IDEMPOTENCY_REDIS_CONNECTING   1  /* connect + handshake */
#define NGX_HTTP_IDEMPOTENCY_REDIS_READY        2

#define NGX_HTTP_IDEMPOTENCY_REDIS_PREFIX       "idempotency:"


/* one store's connection in one worker */
typedef struct {
    ngx_http_idempotency_store_t      *store;
    ngx_log_t                         *log;

    redisAsyncContext                 *ac;
    ngx_connection_t                  *c;
    ngx_uint_t                         state;
    ngx_uint_t                         handshake;  /* replies still owed */
    ngx_event_t                        timer;      /* connect + handshake */

    ngx_queue_t                        ops;        /* every live op */

    ngx_http_idempotency_outage_t      outage;

    ngx_str_t                          key;        /* buffer: prefix+hex */
    size_t                             prefix_len;

    unsigned                           probe:1;    /* made while down */
    unsigned                           closing:1;  /* we free the context */
    unsigned                           lost:1;     /* replies were lost */
    unsigned                           in_write:1;
    unsigned                           exiting:1;
} ngx_http_idempotency_redis_t;


static ngx_http_idempotency_redis_t *ngx_http_idempotency_redis_client(
    ngx_http_idempotency_store_t *store);
static ngx_int_t ngx_http_idempotency_redis_usable(
    ngx_http_idempotency_redis_t *client);
static ngx_int_t ngx_http_idempotency_redis_connect(
    ngx_http_idempotency_redis_t *client);
static ngx_int_t ngx_http_idempotency_redis_write(
    ngx_http_idempotency_store_t *store, const char *name, u_char *key_hash,
    int argc, const char **argv, size_t *argvlen);
static ngx_int_t ngx_http_idempotency_redis_command(
    ngx_http_idempotency_redis_t *client, redisCallbackFn *fn, void *privdata,
    int argc, const char **argv, const size_t *argvlen, ngx_uint_t *owed);
static ngx_int_t ngx_http_idempotency_redis_handshake_cmd(
    ngx_http_idempotency_redis_t *client, const char *cmd, u_char *arg,
    size_t len);
static ngx_int_t ngx_http_idempotency_redis_handshake(
    ngx_http_idempotency_redis_t *client);
static void ngx_http_idempotency_redis_handshake_reply(
    redisAsyncContext *ac, void *r, void *privdata);
static void ngx_http_idempotency_redis_connect_timeout(ngx_event_t *ev);
static void ngx_http_idempotency_redis_failed(
    ngx_http_idempotency_redis_t *client, const char *what,
    const char *detail, size_t len);
static void ngx_http_idempotency_redis_drop(
    ngx_http_idempotency_redis_t *client, const char *what,
    const char *detail, size_t len);
static void ngx_http_idempotency_redis_close(
    ngx_http_idempotency_redis_t *client);

static void ngx_http_idempotency_redis_watch(
    ngx_http_idempotency_redis_t *client, ngx_uint_t write, ngx_uint_t on);
static void ngx_http_idempotency_redis_add_read(void *data);
static void ngx_http_idempotency_redis_del_read(void *data);
static void ngx_http_idempotency_redis_add_write(void *data);
static void ngx_http_idempotency_redis_del_write(void *data);
static void ngx_http_idempotency_redis_cleanup(void *data);
static void ngx_http_idempotency_redis_read_handler(ngx_event_t *rev);
static void ngx_http_idempotency_redis_write_handler(ngx_event_t *wev);

static ngx_http_idempotency_redis_op_t *ngx_http_idempotency_redis_op(
    ngx_http_idempotency_redis_t *client, const char *name);
static ngx_int_t ngx_http_idempotency_redis_send(
    ngx_http_idempotency_redis_op_t *op, int argc, const char **argv,
    const size_t *argvlen);
static void ngx_http_idempotency_redis_reply(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idempotency_redis_op_timeout(ngx_event_t *ev);
static void ngx_http_idempotency_redis_finish(
    ngx_http_idempotency_redis_op_t *op, ngx_uint_t rc);
static void ngx_http_idempotency_redis_done(ngx_event_t *ev);
static void ngx_http_idempotency_redis_free(
    ngx_http_idempotency_redis_op_t *op);
static ngx_str_t *ngx_http_idempotency_redis_key(
    ngx_http_idempotency_redis_t *client, u_char *key_hash);


ngx_http_idempotency_redis_op_t *
ngx_http_idempotency_redis_get(ngx_http_idempotency_store_t *store,
    u_char *key_hash)
{
    ngx_str_t                        *key;
    ngx_http_idempotency_redis_t     *client;
    ngx_http_idempotency_redis_op_t  *op;
    const char                       *argv[4];
    size_t                            argvlen[4];
    u_char                            last[NGX_SIZE_T_LEN];

    client = ngx_http_idempotency_redis_client(store);
    if (client == NULL) {
        return NULL;
    }

    op = ngx_http_idempotency_redis_op(client, "lookup");
    if (op == NULL) {
        return NULL;
    }

    op->lookup = 1;

    if (ngx_http_idempotency_redis_usable(client) != NGX_OK) {
        ngx_http_idempotency_redis_finish(op, NGX_HTTP_IDEMPOTENCY_REDIS_DOWN);
        return op;
    }

    key = ngx_http_idempotency_redis_key(client, key_hash);

    argv[1] = (const char *) key->data;
    argvlen[1] = key->len;

    /*
     * GETRANGE and PTTL, pipelined: the remaining time to live comes from
     * Redis' clock, so hosts whose clocks disagree still never keep an
     * entry past its retention
     */

    argv[0] = "GETRANGE";
    argvlen[0] = 8;
    argv[2] = "0";
    argvlen[2] = 1;
    argv[3] = (const char *) last;
    argvlen[3] = ngx_sprintf(last, "%uz", store->redis_max_entry) - last;

    if (ngx_http_idempotency_redis_send(op, 4, argv, argvlen) != NGX_OK) {
        return op;
    }

    argv[0] = "PTTL";
    argvlen[0] = 4;

    if (ngx_http_idempotency_redis_send(op, 2, argv, argvlen) != NGX_OK) {
        return op;
    }

    ngx_add_timer(&op->timer, store->redis_timeout);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, client->log, 0,
                   "idempotency redis lookup: %V (op %p)", key, op);

    return op;
}


ngx_int_t
ngx_http_idempotency_redis_set(ngx_http_idempotency_store_t *store,
    u_char *key_hash, u_char *entry, size_t len, time_t ttl)
{
    u_char       *p;
    const char   *argv[5];
    size_t        argvlen[5];
    u_char        ttls[NGX_TIME_T_LEN];

    p = ngx_sprintf(ttls, "%T", ttl);

    argv[0] = "SET";
    argvlen[0] = 3;
    argv[2] = (const char *) entry;
    argvlen[2] = len;
    argv[3] = "EX";
    argvlen[3] = 2;
    argv[4] = (const char *) ttls;
    argvlen[4] = p - ttls;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idempotency redis store: %uz bytes, ttl %T", len, ttl);

    return ngx_http_idempotency_redis_write(store, "store", key_hash, 5,
                                            argv, argvlen);
}


ngx_int_t
ngx_http_idempotency_redis_del(ngx_http_idempotency_store_t *store,
    u_char *key_hash)
{
    const char  *argv[2];
    size_t       argvlen[2];

    argv[0] = "DEL";
    argvlen[0] = 3;

    return ngx_http_idempotency_redis_write(store, "delete", key_hash, 2,
                                            argv, argvlen);
}


/*
 * A write whose reply nobody waits for, with its own deadline; argv[1]
 * is made the key's.  An entry is only an optimisation: none is written
 * while Redis is away, and nothing waits for it.
 */

static ngx_int_t
ngx_http_idempotency_redis_write(ngx_http_idempotency_store_t *store,
    const char *name, u_char *key_hash, int argc, const char **argv,
    size_t *argvlen)
{
    ngx_str_t                        *key;
    ngx_http_idempotency_redis_t     *client;
    ngx_http_idempotency_redis_op_t  *op;

    client = ngx_http_idempotency_redis_client(store);

    if (client == NULL
        || ngx_http_idempotency_redis_usable(client) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    op = ngx_http_idempotency_redis_op(client, name);
    if (op == NULL) {
        return NGX_DECLINED;
    }

    key = ngx_http_idempotency_redis_key(client, key_hash);

    argv[1] = (const char *) key->data;
    argvlen[1] = key->len;

    /* the library copies the command into its output buffer */

    if (ngx_http_idempotency_redis_send(op, argc, argv, argvlen) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_add_timer(&op->timer, store->redis_timeout);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, client->log, 0,
                   "idempotency redis %s: %V (op %p)", name, key, op);

    return NGX_OK;
}


void
ngx_http_idempotency_redis_detach(ngx_http_idempotency_redis_op_t *op)
{
    op->handler = NULL;
    op->data = NULL;
}


ngx_pool_t *
ngx_http_idempotency_redis_take_pool(ngx_http_idempotency_redis_op_t *op)
{
    ngx_pool_t  *pool;

    pool = op->pool;
    op->pool = NULL;

    return pool;
}


ngx_uint_t
ngx_http_idempotency_redis_up(ngx_http_idempotency_store_t *store)
{
    ngx_http_idempotency_redis_t  *client;

    client = store->redis;

    return client == NULL || !client->outage.down;
}


void
ngx_http_idempotency_redis_exit(ngx_cycle_t *cycle)
{
    ngx_uint_t                          i;
    ngx_queue_t                        *q;
    ngx_http_idempotency_store_t      **stores;
    ngx_http_idempotency_redis_t       *client;
    ngx_http_idempotency_redis_op_t    *op;
    ngx_http_idempotency_main_conf_t   *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_idempotency_module);
    if (imcf == NULL) {
        return;
    }

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {

        client = stores[i]->redis;
        if (client == NULL) {
            continue;
        }

        /* the process is going away: ops are dropped, not answered */

        client->exiting = 1;

        if (client->ac) {
            ngx_http_idempotency_redis_close(client);
        }

        while (!ngx_queue_empty(&client->ops)) {
            q = ngx_queue_head(&client->ops);
            op = ngx_queue_data(q, ngx_http_idempotency_redis_op_t, queue);
            ngx_http_idempotency_redis_free(op);
        }

        if (client->timer.timer_set) {
            ngx_del_timer(&client->timer);
        }

        stores[i]->redis = NULL;
    }
}


static ngx_http_idempotency_redis_t *
ngx_http_idempotency_redis_client(ngx_http_idempotency_store_t *store)
{
    u_char                        *p;
    ngx_http_idempotency_redis_t  *client;

    if (store->redis) {
        return store->redis;
    }

    /* per worker: the configuration is private to the process after fork */

    client = ngx_pcalloc(ngx_cycle->pool,
                         sizeof(ngx_http_idempotency_redis_t));
    if (client == NULL) {
        return NULL;
    }

    client->prefix_len = sizeof(NGX_HTTP_IDEMPOTENCY_REDIS_PREFIX) - 1
                         + store->name.len + 1;

    client->key.data = ngx_pnalloc(ngx_cycle->pool, client->prefix_len
                                   + 2 * NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    if (client->key.data == NULL) {
        return NULL;
    }

    p = ngx_cpymem(client->key.data, NGX_HTTP_IDEMPOTENCY_REDIS_PREFIX,
                   sizeof(NGX_HTTP_IDEMPOTENCY_REDIS_PREFIX) - 1);
    p = ngx_cpymem(p, store->name.data, store->name.len);
    *p = ':';

    client->store = store;
    client->log = ngx_cycle->log;

    ngx_queue_init(&client->ops);

    ngx_http_idempotency_outage_init(&client->outage, client->log,
                                     &store->name, "redis",
                                     &store->redis_name);

    client->timer.handler = ngx_http_idempotency_redis_connect_timeout;
    client->timer.data = client;
    client->timer.log = client->log;

    store->redis = client;

    return client;
}


/*
 * NGX_OK: ops may be sent (the connection is ready, or being made while
 * Redis is not known to be down: they wait in the library's buffer).
 * NGX_DECLINED: Redis is down; a probe is started when the backoff allows.
 */

static ngx_int_t
ngx_http_idempotency_redis_usable(ngx_http_idempotency_redis_t *client)
{
    if (client->ac) {
        return client->probe ? NGX_DECLINED : NGX_OK;
    }

    if (ngx_http_idempotency_outage_backoff(&client->outage)) {
        return NGX_DECLINED;
    }

    if (ngx_http_idempotency_redis_connect(client) != NGX_OK) {
        return NGX_DECLINED;
    }

    return client->probe ? NGX_DECLINED : NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_redis_connect(ngx_http_idempotency_redis_t *client)
{
    redisAsyncContext             *ac;
    ngx_connection_t              *c;
    ngx_http_idempotency_store_t  *store;

    store = client->store;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, client->log, 0,
                   "idempotency redis connect: redis=%V%s",
                   &store->redis_name,
                   client->outage.down ? " (probe)" : "");

    /* an IP literal or a unix socket: the library looks no name up */

    if (store->redis_socket.len) {
        ac = redisAsyncConnectUnix((const char *) store->redis_socket.data);

    } else {
        ac = redisAsyncConnect((const char *) store->redis_host.data,
                               store->redis_port);
    }

    if (ac == NULL) {
        ngx_http_idempotency_redis_failed(client, "connect failed",
                                          "no memory",
                                          sizeof("no memory") - 1);
        return NGX_ERROR;
    }

    if (ac->err) {
        ngx_http_idempotency_redis_failed(client, "connect failed",
                                          ac->errstr, ngx_strlen(ac->errstr));
        redisAsyncFree(ac);
        return NGX_ERROR;
    }

    c = ngx_http_idempotency_conn_wrap(ac->c.fd, client,
                                       ngx_http_idempotency_redis_read_handler,
                                       ngx_http_idempotency_redis_write_handler,
                                       client->log);
    if (c == NULL) {
        ngx_http_idempotency_redis_failed(client, "connect failed",
                                          "no free connection",
                                          sizeof("no free connection") - 1);
        redisAsyncFree(ac);
        return NGX_ERROR;
    }

    ac->ev.data = client;
    ac->ev.addRead = ngx_http_idempotency_redis_add_read;
    ac->ev.delRead = ngx_http_idempotency_redis_del_read;
    ac->ev.addWrite = ngx_http_idempotency_redis_add_write;
    ac->ev.delWrite = ngx_http_idempotency_redis_del_write;
    ac->ev.cleanup = ngx_http_idempotency_redis_cleanup;

    client->ac = ac;
    client->c = c;
    client->state = NGX_HTTP_IDEMPOTENCY_REDIS_CONNECTING;
    client->probe = client->outage.down;
    client->lost = 0;
    client->closing = 0;

    ngx_add_timer(&client->timer, store->redis_timeout);

    /* the first write event tells that the connect ended */
    ngx_http_idempotency_redis_add_write(client);

    if (ngx_http_idempotency_redis_handshake(client) != NGX_OK) {
        ngx_http_idempotency_redis_drop(client, "connect failed",
                                        "could not queue the handshake",
                                        sizeof("could not queue the "
                                               "handshake") - 1);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* AUTH and SELECT when configured, then PING, whose answer means ready */

static ngx_int_t
ngx_http_idempotency_redis_handshake(ngx_http_idempotency_redis_t *client)
{
    u_char                        *p;
    ngx_http_idempotency_store_t  *store;
    u_char                         db[NGX_INT_T_LEN];

    store = client->store;
    client->handshake = 0;

    if (store->redis_password.len
        && ngx_http_idempotency_redis_handshake_cmd(client, "AUTH",
                                              store->redis_password.data,
                                              store->redis_password.len)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (store->redis_db > 0) {
        p = ngx_sprintf(db, "%i", store->redis_db);

        if (ngx_http_idempotency_redis_handshake_cmd(client, "SELECT", db,
                                                     p - db)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_idempotency_redis_handshake_cmd(client, "PING", NULL, 0);
}


/* a command of the handshake, with its one argument, or none (NULL) */

static ngx_int_t
ngx_http_idempotency_redis_handshake_cmd(ngx_http_idempotency_redis_t *client,
    const char *cmd, u_char *arg, size_t len)
{
    const char  *argv[2];
    size_t       argvlen[2];

    argv[0] = cmd;
    argvlen[0] = ngx_strlen(cmd);
    argv[1] = (const char *) arg;
    argvlen[1] = len;

    return ngx_http_idempotency_redis_command(client,
                                    ngx_http_idempotency_redis_handshake_reply,
                                    client, arg ? 2 : 1, argv, argvlen,
                                    &client->handshake);
}


static void
ngx_http_idempotency_redis_handshake_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    ngx_http_idempotency_redis_t  *client = privdata;

    redisReply  *reply = r;

    client->handshake--;

    if (reply == NULL) {
        /* the context is going away; its cleanup hook says why */

        if (!client->closing) {
            client->lost = 1;
        }

        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        /* a wrong password, a bad database number, still loading, ... */
        ngx_http_idempotency_redis_drop(client, "handshake failed",
                                        reply->str, reply->len);
        return;
    }

    if (client->handshake) {
        return;
    }

    if (client->timer.timer_set) {
        ngx_del_timer(&client->timer);
    }

    client->state = NGX_HTTP_IDEMPOTENCY_REDIS_READY;
    client->probe = 0;

    ngx_http_idempotency_outage_over(&client->outage);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, client->log, 0,
                   "idempotency redis ready: redis=%V",
                   &client->store->redis_name);
}


static void
ngx_http_idempotency_redis_connect_timeout(ngx_event_t *ev)
{
    ngx_http_idempotency_redis_t  *client;

    client = ev->data;

    if (client->ac == NULL) {
        return;
    }

    ngx_http_idempotency_redis_drop(client, "connect timed out", NULL, 0);
}


/*
 * Redis failed: one error line per outage, then a backoff during which
 * ops fail at once; each failed probe doubles it (one at a time: every
 * failure while down is one).
 */

static void
ngx_http_idempotency_redis_failed(ngx_http_idempotency_redis_t *client,
    const char *what, const char *detail, size_t len)
{
    if (client->exiting) {
        return;
    }

    ngx_http_idempotency_outage_failed(&client->outage, ngx_current_msec,
                                       "%s%s%*s; replays are looked up in "
                                       "MySQL until it answers again",
                                       what, detail ? ": " : "",
                                       detail ? len : 0,
                                       detail ? detail : "");

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, client->log, 0,
                   "idempotency redis down: redis=%V, %s, backoff %M",
                   &client->store->redis_name, what,
                   client->outage.backoff);
}


/* fails Redis and frees the connection; safe inside a reply callback */

static void
ngx_http_idempotency_redis_drop(ngx_http_idempotency_redis_t *client,
    const char *what, const char *detail, size_t len)
{
    ngx_http_idempotency_redis_failed(client, what, detail, len);

    if (client->ac && !client->closing) {
        ngx_http_idempotency_redis_close(client);
    }
}


/*
 * Frees the context: pending replies get NULL, then the cleanup hook
 * runs.  Inside a reply callback the library defers this until the
 * callback has returned.
 */

static void
ngx_http_idempotency_redis_close(ngx_http_idempotency_redis_t *client)
{
    client->closing = 1;
    redisAsyncFree(client->ac);
}


/* the library wants (on) or no longer wants a read or write event */

static void
ngx_http_idempotency_redis_watch(ngx_http_idempotency_redis_t *client,
    ngx_uint_t write, ngx_uint_t on)
{
    ngx_connection_t  *c;

    c = client->c;

    if (c == NULL) {
        return;
    }

    if (ngx_http_idempotency_conn_watch(write ? c->write : c->read, on)
        != NGX_OK
        && on)
    {
        /* the op timers end what cannot be read or written */
        ngx_log_error(NGX_LOG_ALERT, client->log, 0,
                      "idempotency store \"%V\" redis=%V: "
                      "could not add the %s event",
                      &client->store->name, &client->store->redis_name,
                      write ? "write" : "read");
    }
}


static void
ngx_http_idempotency_redis_add_read(void *data)
{
    ngx_http_idempotency_redis_watch(data, 0, 1);
}


static void
ngx_http_idempotency_redis_del_read(void *data)
{
    ngx_http_idempotency_redis_watch(data, 0, 0);
}


static void
ngx_http_idempotency_redis_del_write(void *data)
{
    ngx_http_idempotency_redis_watch(data, 1, 0);
}


static void
ngx_http_idempotency_redis_add_write(void *data)
{
    ngx_http_idempotency_redis_t  *client = data;

    ngx_http_idempotency_redis_watch(client, 1, 1);

    /*
     * An armed edge-triggered event reports nothing new for a socket that
     * is writable already, so a command queued on a connected context is
     * written from a posted event.  Inside the write handler a partial
     * write means the socket buffer is full, and its draining reports an
     * edge.  Before the connect ends, the edge of its end comes anyway,
     * and writing earlier would make the library think it had connected.
     */

    if (client->c
        && client->ac
        && (client->ac->c.flags & REDIS_CONNECTED)
        && !client->in_write)
    {
        ngx_post_event(client->c->write, &ngx_posted_events);
    }
}


/*
 * The library frees the context: after the pending callbacks got NULL,
 * before it closes the fd.  Whatever the reason, the connection is gone.
 */

static void
ngx_http_idempotency_redis_cleanup(void *data)
{
    ngx_http_idempotency_redis_t  *client = data;

    ngx_uint_t          state;
    redisAsyncContext  *ac;

    ac = client->ac;

    if (ac == NULL) {
        return;
    }

    if (client->c) {
        /* the library closes the fd after this hook */
        ngx_http_idempotency_conn_unwrap(client->c, 0);
        client->c = NULL;
    }

    if (client->timer.timer_set) {
        ngx_del_timer(&client->timer);
    }

    state = client->state;

    client->ac = NULL;
    client->state = NGX_HTTP_IDEMPOTENCY_REDIS_NONE;
    client->probe = 0;

    if (client->closing) {
        /* we freed it, and said why */
        client->closing = 0;
        return;
    }

    if (ac->err == REDIS_ERR_EOF
        && state == NGX_HTTP_IDEMPOTENCY_REDIS_READY
        && !client->lost)
    {
        /* closed while idle: made again on next use */

        ngx_log_error(NGX_LOG_INFO, client->log, 0,
                      "idempotency store \"%V\" redis=%V: "
                      "idle connection closed by the server",
                      &client->store->name, &client->store->redis_name);
        return;
    }

    ngx_http_idempotency_redis_failed(client,
                            (state == NGX_HTTP_IDEMPOTENCY_REDIS_READY)
                            ? "connection lost" : "connect failed",
                            ac->errstr ? ac->errstr : "unknown error",
                            ngx_strlen(ac->errstr ? ac->errstr
                                                  : "unknown error"));
}


static void
ngx_http_idempotency_redis_read_handler(ngx_event_t *rev)
{
    ngx_connection_t              *c;
    redisAsyncContext             *ac;
    ngx_http_idempotency_redis_t  *client;

    c = rev->data;
    client = c->data;

    for ( ;; ) {
        ac = client->ac;

        if (ac == NULL) {
            return;
        }

        redisAsyncHandleRead(ac);

        if (client->ac != ac || !(ac->c.flags & REDIS_CONNECTED)) {
            /* freed inside, or still connecting */
            return;
        }

        /*
         * hiredis 0.14 reads at most 16 KiB per call, and an
         * edge-triggered event does not report what is left in the
         * socket again: read until it would block
         */

        if (ngx_http_idempotency_conn_peek(c) == NGX_AGAIN) {
            return;
        }

        /* more data, the end of the stream or an error: the library's */
    }
}


static void
ngx_http_idempotency_redis_write_handler(ngx_event_t *wev)
{
    ngx_connection_t              *c;
    ngx_http_idempotency_redis_t  *client;

    c = wev->data;
    client = c->data;

    if (client->ac == NULL) {
        return;
    }

    client->in_write = 1;
    redisAsyncHandleWrite(client->ac);
    client->in_write = 0;
}


static ngx_http_idempotency_redis_op_t *
ngx_http_idempotency_redis_op(ngx_http_idempotency_redis_t *client,
    const char *name)
{
    ngx_http_idempotency_redis_op_t  *op;

    op = ngx_calloc(sizeof(ngx_http_idempotency_redis_op_t), client->log);
    if (op == NULL) {
        return NULL;
    }

    op->client = client;
    op->name = name;
    op->pttl = -1;
    op->started = ngx_current_msec;

    /* bounded by redis_timeout: not cancelable, like the request's own */

    op->timer.handler = ngx_http_idempotency_redis_op_timeout;
    op->timer.data = op;
    op->timer.log = client->log;

    op->done.handler = ngx_http_idempotency_redis_done;
    op->done.data = op;
    op->done.log = client->log;

    ngx_queue_insert_tail(&client->ops, &op->queue);

    return op;
}


/* a command queued on the context; *owed counts the replies to come */

static ngx_int_t
ngx_http_idempotency_redis_command(ngx_http_idempotency_redis_t *client,
    redisCallbackFn *fn, void *privdata, int argc, const char **argv,
    const size_t *argvlen, ngx_uint_t *owed)
{
    if (redisAsyncCommandArgv(client->ac, fn, privdata, argc, argv, argvlen)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    (*owed)++;

    return NGX_OK;
}


/* queues a command of the op; if it cannot, the op fails */

static ngx_int_t
ngx_http_idempotency_redis_send(ngx_http_idempotency_redis_op_t *op,
    int argc, const char **argv, const size_t *argvlen)
{
    if (ngx_http_idempotency_redis_command(op->client,
                                           ngx_http_idempotency_redis_reply,
                                           op, argc, argv, argvlen,
                                           &op->replies)
        != NGX_OK)
    {
        ngx_http_idempotency_redis_finish(op,
                                          NGX_HTTP_IDEMPOTENCY_REDIS_ERROR);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_idempotency_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    ngx_http_idempotency_redis_op_t  *op = privdata;

    redisReply                    *reply = r;
    ngx_http_idempotency_redis_t  *client;

    client = op->client;

    op->replies--;
    op->got++;

    if (client->exiting) {
        /* ngx_http_idempotency_redis_exit() frees the op */
        return;
    }

    if (reply == NULL) {
        if (!client->closing) {
            client->lost = 1;
        }

        ngx_http_idempotency_redis_finish(op,
                                          NGX_HTTP_IDEMPOTENCY_REDIS_ERROR);
        goto done;
    }

    if (op->finished) {
        /* a late answer to an op that timed out */
        goto done;
    }

    if (reply->type == REDIS_REPLY_ERROR) {

        if (reply->len >= 9
            && ngx_strncmp(reply->str, "WRONGTYPE", 9) == 0)
        {
            /* the key holds something else than a string */
            ngx_http_idempotency_redis_finish(op,
                                              NGX_HTTP_IDEMPOTENCY_REDIS_BAD);
            goto done;
        }

        /* NOAUTH, LOADING, OOM, READONLY, ...: Redis is not usable */

        ngx_http_idempotency_redis_finish(op,
                                          NGX_HTTP_IDEMPOTENCY_REDIS_ERROR);
        ngx_http_idempotency_redis_drop(client, "error reply", reply->str,
                                        reply->len);
        goto done;
    }

    if (op->lookup && op->got == 1) {

        /* GETRANGE of a lookup: "" for a key that does not exist */

        if (reply->type == REDIS_REPLY_STRING
            && reply->len > client->store->redis_max_entry)
        {
            op->too_big = 1;
            op->value.len = reply->len;

        } else if (reply->type == REDIS_REPLY_STRING && reply->len) {
            op->pool = ngx_create_pool(1024, client->log);

            if (op->pool) {
                op->value.data = ngx_pnalloc(op->pool, reply->len);
            }

            if (op->value.data == NULL) {
                ngx_http_idempotency_redis_finish(op,
                                            NGX_HTTP_IDEMPOTENCY_REDIS_ERROR);
                goto done;
            }

            /* the library frees the reply after this callback */

            ngx_memcpy(op->value.data, reply->str, reply->len);
            op->value.len = reply->len;

        } else if (reply->type != REDIS_REPLY_STRING
                   && reply->type != REDIS_REPLY_NIL)
        {
            ngx_http_idempotency_redis_finish(op,
                                              NGX_HTTP_IDEMPOTENCY_REDIS_BAD);
            goto done;
        }

    } else if (op->lookup && reply->type == REDIS_REPLY_INTEGER) {
        /* PTTL of a lookup: -2 the key is gone, -1 no expiry */
        op->pttl = reply->integer;
    }

    if (op->replies == 0) {
        ngx_http_idempotency_redis_finish(op, NGX_HTTP_IDEMPOTENCY_REDIS_OK);
    }

done:

    if (op->replies == 0 && op->delivered) {
        ngx_http_idempotency_redis_free(op);
    }
}


static void
ngx_http_idempotency_redis_op_timeout(ngx_event_t *ev)
{
    u_char                            *p;
    ngx_http_idempotency_redis_t      *client;
    ngx_http_idempotency_redis_op_t   *op;
    u_char                             text[64], what[32];

    op = ev->data;
    client = op->client;

    ngx_http_idempotency_redis_finish(op, NGX_HTTP_IDEMPOTENCY_REDIS_TIMEOUT);

    /* no answer within the deadline: the server hangs, or the network */

    if (client->ac) {
        p = ngx_snprintf(text, sizeof(text), "%M ms",
                         client->store->redis_timeout);

        /* "lookup", "store" or "delete" timed out */
        (void) ngx_snprintf(what, sizeof(what), "%s timed out%Z", op->name);

        ngx_http_idempotency_redis_drop(client, (const char *) what,
                                        (const char *) text, p - text);
    }
}


/* the op's result is known: its handler runs from a posted event */

static void
ngx_http_idempotency_redis_finish(ngx_http_idempotency_redis_op_t *op,
    ngx_uint_t rc)
{
    ngx_http_idempotency_redis_t  *client;

    if (op->finished) {
        return;
    }

    op->finished = 1;
    op->rc = rc;

    client = op->client;

    /* a lookup or a write that was not tried (Redis down) is no operation */

    if (rc != NGX_HTTP_IDEMPOTENCY_REDIS_DOWN) {
        ngx_http_idempotency_metrics_op(client->store,
                                        op->lookup
                                        ? NGX_HTTP_IDEMPOTENCY_OP_REDIS_GET
                                        : NGX_HTTP_IDEMPOTENCY_OP_REDIS_SET,
                                        rc == NGX_HTTP_IDEMPOTENCY_REDIS_OK
                                        || rc == NGX_HTTP_IDEMPOTENCY_REDIS_BAD,
                                        ngx_current_msec - op->started);
    }

    if (op->timer.timer_set) {
        ngx_del_timer(&op->timer);
    }

    ngx_post_event(&op->done, &ngx_posted_events);
}


static void
ngx_http_idempotency_redis_done(ngx_event_t *ev)
{
    ngx_http_idempotency_redis_op_t        *op;
    ngx_http_idempotency_redis_handler_pt   handler;

    op = ev->data;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "idempotency redis %s finished: rc=%ui, %uz bytes%s",
                   op->name, op->rc, op->value.len,
                   op->handler ? "" : " (detached)");

    op->delivered = 1;

    handler = op->handler;

    if (handler) {
        op->handler = NULL;
        handler(op);
    }

    if (op->replies == 0) {
        ngx_http_idempotency_redis_free(op);
    }
}


static void
ngx_http_idempotency_redis_free(ngx_http_idempotency_redis_op_t *op)
{
    if (op->timer.timer_set) {
        ngx_del_timer(&op->timer);
    }

    if (op->done.posted) {
        ngx_delete_posted_event(&op->done);
    }

    ngx_queue_remove(&op->queue);

    if (op->pool) {
        ngx_destroy_pool(op->pool);
    }

    ngx_free(op);
}


static ngx_str_t *
ngx_http_idempotency_redis_key(ngx_http_idempotency_redis_t *client,
    u_char *key_hash)
{
    u_char  *p;

    /* the library formats the command at once: one buffer serves all */

    p = ngx_hex_dump(client->key.data + client->prefix_len, key_hash,
                     NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    client->key.len = p - client->key.data;

    return &client->key;
}
