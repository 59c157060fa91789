
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the shell the store drivers share.
 *
 * The fd belongs to the library: it is never closed here, and any I/O
 * of our own on it uses MSG_DONTWAIT, as the library may keep it in
 * blocking mode.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idempotency_conn.h"


/* keepalive probes of an idle store connection, seconds */
#define NGX_HTTP_IDEMPOTENCY_KEEPIDLE   10
#define NGX_HTTP_IDEMPOTENCY_KEEPINTVL  2
#define NGX_HTTP_IDEMPOTENCY_KEEPCNT    3


static void ngx_http_idempotency_conn_keepalive(ngx_socket_t fd,
    ngx_log_t *log);


ngx_connection_t *
ngx_http_idempotency_conn_wrap(ngx_socket_t fd, void *data,
    ngx_event_handler_pt read, ngx_event_handler_pt write, ngx_log_t *log)
{
    ngx_connection_t  *c;

    c = ngx_get_connection(fd, log);
    if (c == NULL) {
        return NULL;
    }

    c->data = data;
    c->number = ngx_atomic_fetch_add(ngx_connection_counter, 1);

    c->read->handler = read;
    c->write->handler = write;
    c->read->log = log;
    c->write->log = log;

    ngx_http_idempotency_conn_keepalive(fd, log);

    return c;
}


/*
 * TCP keepalive on a store connection: an idle one that a silent
 * partition cut (no RST, no FIN) is found dead in about 16 s and closed,
 * rather than kept until an operation waits on it for its whole
 * timeout.  Operations have their own deadlines; this is for the idle.
 * A unix socket takes SO_KEEPALIVE and ignores it; the TCP tunables
 * fail there, and stop at the first failure.
 */

static void
ngx_http_idempotency_conn_keepalive(ngx_socket_t fd, ngx_log_t *log)
{
    int  on;
#if (NGX_HAVE_KEEPALIVE_TUNABLE)
    int  idle, intvl, cnt;
#endif

    on = 1;

    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, (const void *) &on,
                   sizeof(int))
        == -1)
    {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, log, ngx_socket_errno,
                       "idempotency: no keepalive on the store socket");
        return;
    }

#if (NGX_HAVE_KEEPALIVE_TUNABLE)

    idle = NGX_HTTP_IDEMPOTENCY_KEEPIDLE;
    intvl = NGX_HTTP_IDEMPOTENCY_KEEPINTVL;
    cnt = NGX_HTTP_IDEMPOTENCY_KEEPCNT;

    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, (const void *) &idle,
                   sizeof(int))
        == -1)
    {
        return;
    }

    (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, (const void *) &intvl,
                      sizeof(int));
    (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, (const void *) &cnt,
                      sizeof(int));

#endif
}


void
ngx_http_idempotency_conn_unwrap(ngx_connection_t *c, ngx_uint_t closed)
{
    ngx_uint_t  flags;

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    /* a closed fd: epoll forgot it by itself */

    flags = closed ? NGX_CLOSE_EVENT : 0;

    if (ngx_del_conn && (c->read->active || c->write->active)) {
        (void) ngx_del_conn(c, flags);

    } else {
        if (c->read->active || c->read->disabled) {
            (void) ngx_del_event(c->read, NGX_READ_EVENT, flags);
        }

        if (c->write->active || c->write->disabled) {
            (void) ngx_del_event(c->write, NGX_WRITE_EVENT, flags);
        }
    }

    ngx_free_connection(c);

    c->fd = (ngx_socket_t) -1;
}


ngx_int_t
ngx_http_idempotency_conn_watch(ngx_event_t *ev, ngx_uint_t on)
{
    if (on) {
        /* not ready: an event not armed yet is added, an armed one stays */

        ev->ready = 0;

        return ev->write ? ngx_handle_write_event(ev, 0)
                         : ngx_handle_read_event(ev, 0);
    }

    /* an edge-triggered event stays: nothing to wait for means no event */

    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && ev->active) {
        return ngx_del_event(ev, ev->write ? NGX_WRITE_EVENT : NGX_READ_EVENT,
                             0);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_conn_peek(ngx_connection_t *c)
{
    u_char     buf[1];
    ssize_t    n;
    ngx_err_t  err;

    for ( ;; ) {
        n = recv(c->fd, buf, 1, MSG_PEEK|MSG_DONTWAIT);

        if (n > 0) {
            return NGX_OK;
        }

        if (n == 0) {
            return NGX_DONE;
        }

        err = ngx_socket_errno;

        if (err == NGX_EAGAIN) {
            c->read->ready = 0;
            return NGX_AGAIN;
        }

        if (err != NGX_EINTR) {
            return NGX_ERROR;
        }
    }
}


void
ngx_http_idempotency_outage_init(ngx_http_idempotency_outage_t *o,
    ngx_log_t *log, ngx_str_t *store, const char *kind, ngx_str_t *server)
{
    ngx_memzero(o, sizeof(ngx_http_idempotency_outage_t));

    o->log = log;
    o->store = store;
    o->kind = kind;
    o->server = server;
}


ngx_uint_t
ngx_http_idempotency_outage_backoff(ngx_http_idempotency_outage_t *o)
{
    return o->down && (ngx_msec_int_t) (o->retry_at - ngx_current_msec) > 0;
}


void
ngx_http_idempotency_outage_failed(ngx_http_idempotency_outage_t *o,
    ngx_msec_t started, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;
    u_char    text[NGX_MAX_ERROR_STR];

    if (!o->down) {
        /* one line per outage; the caller's text never has a password */

        va_start(args, fmt);
        p = ngx_vslprintf(text, text + sizeof(text), fmt, args);
        va_end(args);

        ngx_log_error(NGX_LOG_ERR, o->log, 0,
                      "idempotency store \"%V\" %s=%V: %*s",
                      o->store, o->kind, o->server, p - text, text);

        o->down = 1;
        o->backoff = NGX_HTTP_IDEMPOTENCY_BACKOFF_MIN;

    } else if ((ngx_msec_int_t) (started - o->failed_at) >= 0) {

        /* a probe made after the last failure failed as well */

        o->backoff = ngx_min(o->backoff * 2,
                             NGX_HTTP_IDEMPOTENCY_BACKOFF_MAX);
    }

    o->failed_at = ngx_current_msec;
    o->retry_at = ngx_current_msec + o->backoff;
}


void
ngx_http_idempotency_outage_over(ngx_http_idempotency_outage_t *o)
{
    if (o->down) {
        ngx_log_error(NGX_LOG_NOTICE, o->log, 0,
                      "idempotency store \"%V\" %s=%V: reachable again",
                      o->store, o->kind, o->server);
        o->down = 0;
    }

    o->backoff = 0;
}
