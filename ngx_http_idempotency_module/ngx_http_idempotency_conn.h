
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the shell the store drivers share.
 *
 * A client library (MariaDB Connector/C, hiredis) owns its socket and
 * closes it; the driver wraps the fd in an ngx_connection_t only to
 * wait for it on nginx events, and gives that back without closing the
 * fd.  An outage of a server is one error line when it begins, a backoff
 * during which no connect is tried, and one line when the server is
 * reachable again.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_CONN_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_CONN_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


#define NGX_HTTP_IDEMPOTENCY_BACKOFF_MIN  100
#define NGX_HTTP_IDEMPOTENCY_BACKOFF_MAX  5000


typedef struct {
    ngx_log_t                      *log;
    ngx_str_t                      *store;     /* names, for the log */
    const char                     *kind;      /* "mysql", "redis" */
    ngx_str_t                      *server;

    ngx_msec_t                      backoff;
    ngx_msec_t                      failed_at;
    ngx_msec_t                      retry_at;

    unsigned                        down:1;
} ngx_http_idempotency_outage_t;


/* an ngx_connection_t for a library's fd; NULL if none is free */
ngx_connection_t *ngx_http_idempotency_conn_wrap(ngx_socket_t fd,
    void *data, ngx_event_handler_pt read, ngx_event_handler_pt write,
    ngx_log_t *log);

/*
 * Gives the ngx_connection_t back; the fd stays open for the library.
 * "closed": the library has closed the fd already.
 */
void ngx_http_idempotency_conn_unwrap(ngx_connection_t *c,
    ngx_uint_t closed);

/* waits for the event (on), or no longer (off); NGX_ERROR on failure */
ngx_int_t ngx_http_idempotency_conn_watch(ngx_event_t *ev, ngx_uint_t on);

/*
 * What the socket holds, left for the library to read: NGX_OK data,
 * NGX_DONE the end of the stream, NGX_ERROR an error (ngx_socket_errno),
 * NGX_AGAIN nothing yet (the read event is no longer ready).
 */
ngx_int_t ngx_http_idempotency_conn_peek(ngx_connection_t *c);


void ngx_http_idempotency_outage_init(ngx_http_idempotency_outage_t *o,
    ngx_log_t *log, ngx_str_t *store, const char *kind, ngx_str_t *server);

/* 1: the server is down and its backoff runs: try no connect now */
ngx_uint_t ngx_http_idempotency_outage_backoff(
    ngx_http_idempotency_outage_t *o);

/*
 * An attempt begun at "started" failed: the first failure of an outage
 * logs "idempotency store "S" kind=server: " and fmt; a later one
 * doubles the backoff, unless the attempt was begun before the last
 * failure (connects made together fail as one).
 */
void ngx_http_idempotency_outage_failed(ngx_http_idempotency_outage_t *o,
    ngx_msec_t started, const char *fmt, ...);

/* an attempt succeeded: the end of an outage is logged */
void ngx_http_idempotency_outage_over(ngx_http_idempotency_outage_t *o);


#endif /* _NGX_HTTP_IDEMPOTENCY_CONN_H_INCLUDED_ */
