
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the stored response record.
 */


#include "ngx_http_idempotency_record.h"


/* not replayed: per connection, or made again for each response */
static ngx_str_t  ngx_http_idempotency_skip_headers[] = {
    ngx_string("Connection"),
    ngx_string("Keep-Alive"),
    ngx_string("Proxy-Connection"),
    ngx_string("Transfer-Encoding"),
    ngx_string("TE"),
    ngx_string("Trailer"),
    ngx_string("Upgrade"),
    ngx_string("Content-Length"),
    ngx_string("Content-Type"),
    ngx_string("Date"),
    ngx_string("Server"),
    ngx_string("Idempotent-Replayed"),
    ngx_null_string
};


/*
 * The headers whose r->headers_out pointer nginx's upstream sets when it
 * copies the backend's response, and that later filters look at (gzip
 * makes an ETag weak, "expires" rewrites Expires and Cache-Control in
 * place, sub_filter and ssi clear Last-Modified): a replay sets them
 * alike, so that those filters do to it what they did to the first
 * answer.  Location has rules of its own.
 */
typedef struct {
    ngx_str_t     name;
    ngx_uint_t    offset;
    ngx_uint_t    multi;
} ngx_http_idempotency_out_header_t;


static ngx_http_idempotency_out_header_t  ngx_http_idempotency_out_headers[]
    = {
    { ngx_string("Content-Encoding"),
      offsetof(ngx_http_headers_out_t, content_encoding), 0 },
    { ngx_string("ETag"), offsetof(ngx_http_headers_out_t, etag), 0 },
    { ngx_string("Last-Modified"),
      offsetof(ngx_http_headers_out_t, last_modified), 0 },
    { ngx_string("Expires"), offsetof(ngx_http_headers_out_t, expires), 0 },
    { ngx_string("Accept-Ranges"),
      offsetof(ngx_http_headers_out_t, accept_ranges), 0 },
    { ngx_string("Content-Range"),
      offsetof(ngx_http_headers_out_t, content_range), 0 },
#if (nginx_version >= 1023000)
    { ngx_string("WWW-Authenticate"),
      offsetof(ngx_http_headers_out_t, www_authenticate), 0 },
#endif
    { ngx_string("Cache-Control"),
      offsetof(ngx_http_headers_out_t, cache_control), 1 },
    { ngx_string("Link"), offsetof(ngx_http_headers_out_t, link), 1 },
    { ngx_null_string, 0, 0 }
};


static ngx_int_t ngx_http_idempotency_head_size(ngx_http_request_t *r,
    ngx_array_t *skip, size_t *lenp, ngx_uint_t *np, size_t *ctlenp,
    ngx_uint_t *format2p);
static ngx_int_t ngx_http_idempotency_head_length(ngx_http_request_t *r,
    u_char *buf);
static ngx_uint_t ngx_http_idempotency_completed_location(
    ngx_http_request_t *r, ngx_table_elt_t *h);
static void ngx_http_idempotency_content_type_apply(ngx_http_request_t *r,
    ngx_str_t *value);
static ngx_int_t ngx_http_idempotency_out_header(ngx_http_request_t *r,
    ngx_table_elt_t *h);
static u_char *ngx_http_idempotency_put_field(u_char *p, ngx_str_t *name,
    u_char *value, size_t len);
static ngx_uint_t ngx_http_idempotency_skip(ngx_array_t *skip,
    ngx_str_t *name);
static const char *ngx_http_idempotency_header_bad(ngx_str_t *name,
    ngx_str_t *value);
static const char *ngx_http_idempotency_trailer_bad(ngx_str_t *name,
    ngx_str_t *value);
static ngx_int_t ngx_http_idempotency_field_size(ngx_table_elt_t *h,
    const char *(*bad)(ngx_str_t *name, ngx_str_t *value), size_t *len);
static ngx_int_t ngx_http_idempotency_parse_fields(ngx_pool_t *pool,
    u_char **pp, u_char *last, ngx_array_t *fields);
static ngx_int_t ngx_http_idempotency_trailers_apply(ngx_http_request_t *r,
    ngx_http_idempotency_record_t *rec);
static ngx_table_elt_t *ngx_http_idempotency_push_field(ngx_list_t *list,
    ngx_keyval_t *kv);


static ngx_str_t  ngx_http_idempotency_content_type =
    ngx_string("Content-Type");
static ngx_str_t  ngx_http_idempotency_status = ngx_string(":status");
static ngx_str_t  ngx_http_idempotency_length =
    ngx_string(NGX_HTTP_IDEMPOTENCY_RECORD_LENGTH);
static ngx_str_t  ngx_http_idempotency_location =
    ngx_string(NGX_HTTP_IDEMPOTENCY_RECORD_LOCATION);
static ngx_str_t  ngx_http_idempotency_override =
    ngx_string(NGX_HTTP_IDEMPOTENCY_RECORD_OVERRIDE);


ngx_int_t
ngx_http_idempotency_record_head(ngx_http_request_t *r, ngx_pool_t *pool,
    ngx_array_t *skip, ngx_str_t *out)
{
    u_char           *p, *magic;
    size_t            len, ctlen;
    ngx_int_t         rc, llen;
    ngx_uint_t        i, n, format2;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;
    u_char            lbuf[NGX_OFF_T_LEN];

    rc = ngx_http_idempotency_head_size(r, skip, &len, &n, &ctlen,
                                        &format2);
    if (rc != NGX_OK) {
        return rc;
    }

    llen = ngx_http_idempotency_head_length(r, lbuf);

    if (llen != NGX_DECLINED) {
        len += 2 + ngx_http_idempotency_length.len + 4 + llen;
        n++;
        format2 = 1;
    }

    if (n > 0xffff) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    out->len = len;

    magic = format2 ? (u_char *) NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC2
                    : (u_char *) NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC;

    p = ngx_cpymem(p, magic, sizeof(NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC) - 1);
    p = ngx_http_idempotency_put_be(p, r->headers_out.status, 2);
    p = ngx_http_idempotency_put_be(p, n, 2);

    if (r->headers_out.status_line.len) {
        p = ngx_http_idempotency_put_field(p, &ngx_http_idempotency_status,
                                           r->headers_out.status_line.data,
                                           r->headers_out.status_line.len);
    }

    if (llen != NGX_DECLINED) {
        p = ngx_http_idempotency_put_field(p, &ngx_http_idempotency_length,
                                           lbuf, llen);
    }

    if (r->headers_out.override_charset
        && r->headers_out.override_charset->len)
    {
        p = ngx_http_idempotency_put_field(p, &ngx_http_idempotency_override,
                                        r->headers_out.override_charset->data,
                                        r->headers_out.override_charset->len);
    }

    /* the same Content-Type line the header filter would write */

    if (ctlen) {
        p = ngx_http_idempotency_put_be(p,
                                        ngx_http_idempotency_content_type.len,
                                        2);
        p = ngx_cpymem(p, ngx_http_idempotency_content_type.data,
                       ngx_http_idempotency_content_type.len);
        p = ngx_http_idempotency_put_be(p, ctlen, 4);
        p = ngx_cpymem(p, r->headers_out.content_type.data,
                       r->headers_out.content_type.len);

        if (ctlen > r->headers_out.content_type.len) {
            p = ngx_cpymem(p, "; charset=", sizeof("; charset=") - 1);
            p = ngx_cpymem(p, r->headers_out.charset.data,
                           r->headers_out.charset.len);
        }
    }

    part = &r->headers_out.headers.part;
    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->hash == 0 || ngx_http_idempotency_skip(skip, &h->key)) {
            continue;
        }

        if (ngx_http_idempotency_completed_location(r, h)) {
            p = ngx_http_idempotency_put_field(p,
                                            &ngx_http_idempotency_location,
                                            (u_char *) "", 0);
        }

        p = ngx_http_idempotency_put_field(p, &h->key, h->value.data,
                                           h->value.len);
    }

    return NGX_OK;
}


/*
 * The ":length" field of a response that has no body to count (the
 * answer to a HEAD): the Content-Length its header is sent with, into
 * buf, and its length (0: none); NGX_DECLINED: the record needs none.
 */

static ngx_int_t
ngx_http_idempotency_head_length(ngx_http_request_t *r, u_char *buf)
{
    if (r->method != NGX_HTTP_HEAD && !r->header_only) {
        return NGX_DECLINED;
    }

    if (r->headers_out.content_length_n < 0) {
        return 0;
    }

    return ngx_sprintf(buf, "%O", r->headers_out.content_length_n) - buf;
}


/*
 * A relative Location that nginx's header filter makes absolute: the one
 * r->headers_out.location points to (nginx's upstream sets it for one
 * that proxy_redirect rewrote), starting with "/".  The record marks it
 * with an empty ":location" field before it.
 */

static ngx_uint_t
ngx_http_idempotency_completed_location(ngx_http_request_t *r,
    ngx_table_elt_t *h)
{
    return h == r->headers_out.location
           && h->value.len
           && h->value.data[0] == '/';
}


/*
 * The size of the head and its number of fields (without a ":length"
 * field), the length of the Content-Type value, and whether the head
 * needs format 2 (an override charset, a Location the header filter
 * completes): NGX_DECLINED
 * for what no replay may send (only
 * what ngx_http_idempotency_record_validate() will let through), NGX_ERROR
 * for what the format cannot frame.
 */

static ngx_int_t
ngx_http_idempotency_head_size(ngx_http_request_t *r, ngx_array_t *skip,
    size_t *lenp, ngx_uint_t *np, size_t *ctlenp, ngx_uint_t *format2p)
{
    size_t            len, ctlen;
    ngx_int_t         rc;
    ngx_uint_t        i, n, format2;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    if (r->headers_out.status < 100 || r->headers_out.status > 599
        || ngx_http_idempotency_header_bad(&ngx_http_idempotency_status,
                                           &r->headers_out.status_line)
        || ngx_http_idempotency_header_bad(&ngx_http_idempotency_content_type,
                                           &r->headers_out.content_type)
        || ngx_http_idempotency_header_bad(&ngx_http_idempotency_content_type,
                                           &r->headers_out.charset))
    {
        return NGX_DECLINED;
    }

    len = sizeof(NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC) - 1 + 2 + 2;
    n = 0;
    format2 = 0;

    /* the charset of the backend's X-Accel-Charset, which the charset
     * filter recodes to (the header itself is not passed on) */

    if (r->headers_out.override_charset
        && r->headers_out.override_charset->len)
    {
        if (ngx_http_idempotency_header_bad(&ngx_http_idempotency_override,
                                            r->headers_out.override_charset))
        {
            return NGX_DECLINED;
        }

        if (r->headers_out.override_charset->len > 0xffff) {
            return NGX_ERROR;
        }

        len += 2 + ngx_http_idempotency_override.len + 4
               + r->headers_out.override_charset->len;
        n++;
        format2 = 1;
    }

    /* the upstream's own status line ("422 Unprocessable Entity"), kept
     * as a pseudo-header no HTTP/1 upstream can send */

    if (r->headers_out.status_line.len) {
        if (r->headers_out.status_line.len > 0xffff) {
            return NGX_ERROR;
        }

        len += 2 + ngx_http_idempotency_status.len + 4
               + r->headers_out.status_line.len;
        n++;
    }

    ctlen = 0;

    if (r->headers_out.content_type.len) {
        if (r->headers_out.content_type.len > 0xffff) {
            return NGX_ERROR;
        }

        ctlen = r->headers_out.content_type.len;

        if (r->headers_out.content_type_len == r->headers_out.content_type.len
            && r->headers_out.charset.len)
        {
            ctlen += sizeof("; charset=") - 1 + r->headers_out.charset.len;
        }

        len += 2 + ngx_http_idempotency_content_type.len + 4 + ctlen;
        n++;
    }

    part = &r->headers_out.headers.part;
    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->hash == 0 || ngx_http_idempotency_skip(skip, &h->key)) {
            continue;
        }

        rc = ngx_http_idempotency_field_size(h,
                                     ngx_http_idempotency_header_bad, &len);
        if (rc != NGX_OK) {
            return rc;
        }

        n++;

        if (ngx_http_idempotency_completed_location(r, h)) {
            len += 2 + ngx_http_idempotency_location.len + 4;
            n++;
            format2 = 1;
        }
    }

    if (n > 0xffff) {
        return NGX_ERROR;
    }

    *lenp = len;
    *np = n;
    *format2p = format2;
    *ctlenp = ctlen;

    return NGX_OK;
}


/* a field: u16 name length, name, u32 value length, value */

static u_char *
ngx_http_idempotency_put_field(u_char *p, ngx_str_t *name, u_char *value,
    size_t len)
{
    p = ngx_http_idempotency_put_be(p, name->len, 2);
    p = ngx_cpymem(p, name->data, name->len);
    p = ngx_http_idempotency_put_be(p, len, 4);

    return ngx_cpymem(p, value, len);
}


/*
 * A header or trailer adds its field's size to *len: NGX_DECLINED for
 * what bad() refuses, NGX_ERROR for what the format cannot frame (names
 * in 16 bits, values in 32).
 */

static ngx_int_t
ngx_http_idempotency_field_size(ngx_table_elt_t *h,
    const char *(*bad)(ngx_str_t *name, ngx_str_t *value), size_t *len)
{
    if (bad(&h->key, &h->value)) {
        return NGX_DECLINED;
    }

    if (h->key.len > 0xffff || h->value.len > 0xffffffff) {
        return NGX_ERROR;
    }

    *len += 2 + h->key.len + 4 + h->value.len;

    return NGX_OK;
}


void
ngx_http_idempotency_record_body_len(u_char *p, size_t len)
{
    (void) ngx_http_idempotency_put_be(p, len, 4);
}


ngx_int_t
ngx_http_idempotency_record_trailers(ngx_http_request_t *r, ngx_pool_t *pool,
    ngx_str_t *out)
{
    u_char           *p;
    size_t            len;
    ngx_int_t         rc;
    ngx_uint_t        i, n;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    ngx_str_null(out);

    len = 2;
    n = 0;
    part = &r->headers_out.trailers.part;
    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->hash == 0) {
            continue;
        }

        rc = ngx_http_idempotency_field_size(h,
                                     ngx_http_idempotency_trailer_bad, &len);
        if (rc != NGX_OK) {
            return rc;
        }

        n++;
    }

    if (n == 0) {
        return NGX_OK;
    }

    if (n > 0xffff) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    out->len = len;

    p = ngx_http_idempotency_put_be(p, n, 2);

    part = &r->headers_out.trailers.part;
    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->hash) {
            p = ngx_http_idempotency_put_field(p, &h->key, h->value.data,
                                               h->value.len);
        }
    }

    return NGX_OK;
}


void
ngx_http_idempotency_record_has_trailers(u_char *p)
{
    ngx_memcpy(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC3,
               sizeof(NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC3) - 1);
}


ngx_int_t
ngx_http_idempotency_record_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_http_idempotency_record_t *rec)
{
    u_char      *p, *last;
    size_t       size;
    ngx_uint_t   format3;

    p = data;
    last = data + len;

    if (len < 8) {
        return NGX_ERROR;
    }

    /* formats 2 and 3 are format 1 with more fields (record.h) */

    format3 = (ngx_memcmp(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC3, 4) == 0);

    if (!format3
        && ngx_memcmp(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC, 4) != 0
        && ngx_memcmp(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC2, 4) != 0)
    {
        return NGX_ERROR;
    }

    rec->status = ngx_http_idempotency_get_be(p + 4, 2);
    p += 6;

    if (rec->status < 100 || rec->status > 999) {
        return NGX_ERROR;
    }

    if (ngx_http_idempotency_parse_fields(pool, &p, last, &rec->headers)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((size_t) (last - p) < 4) {
        return NGX_ERROR;
    }

    size = ngx_http_idempotency_get_be(p, 4);
    p += 4;

    if ((size_t) (last - p) < size
        || (!format3 && (size_t) (last - p) != size))
    {
        return NGX_ERROR;
    }

    rec->body.data = p;
    rec->body.len = size;
    p += size;

    if (!format3) {
        return ngx_array_init(&rec->trailers, pool, 1, sizeof(ngx_keyval_t));
    }

    /* format 3: one trailer at least, and nothing after them */

    if (ngx_http_idempotency_parse_fields(pool, &p, last, &rec->trailers)
        != NGX_OK
        || rec->trailers.nelts == 0
        || p != last)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* u16 n, then n fields: into fields (pointing into the input) */

static ngx_int_t
ngx_http_idempotency_parse_fields(ngx_pool_t *pool, u_char **pp,
    u_char *last, ngx_array_t *fields)
{
    u_char        *p;
    size_t         size;
    ngx_uint_t     i, n;
    ngx_keyval_t  *kv;

    p = *pp;

#define ngx_http_idempotency_need(k)                                         \
    if ((size_t) (last - p) < (size_t) (k)) {                                \
        return NGX_ERROR;                                                    \
    }

    ngx_http_idempotency_need(2);
    n = ngx_http_idempotency_get_be(p, 2);
    p += 2;

    /* a field takes 7 bytes at least: no allocation for a count the
     * record cannot hold */

    if (n > (size_t) (last - p) / 7) {
        return NGX_ERROR;
    }

    if (ngx_array_init(fields, pool, n ? n : 1, sizeof(ngx_keyval_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        kv = ngx_array_push(fields);
        if (kv == NULL) {
            return NGX_ERROR;
        }

        ngx_http_idempotency_need(2);
        size = ngx_http_idempotency_get_be(p, 2);
        p += 2;

        ngx_http_idempotency_need(size);

        if (size == 0) {
            return NGX_ERROR;
        }

        kv->key.data = p;
        kv->key.len = size;
        p += size;

        ngx_http_idempotency_need(4);
        size = ngx_http_idempotency_get_be(p, 4);
        p += 4;

        ngx_http_idempotency_need(size);
        kv->value.data = p;
        kv->value.len = size;
        p += size;
    }

#undef ngx_http_idempotency_need

    *pp = p;

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_record_apply(ngx_http_request_t *r,
    ngx_http_idempotency_record_t *rec)
{
    ngx_uint_t        i, completed;
    ngx_keyval_t     *kv;
    ngx_table_elt_t  *h;

    r->headers_out.status = rec->status;

    /* a response that has no body replays as it came: without the
     * Content-Length that the backend never sent */

    r->headers_out.content_length_n =
        (rec->body.len == 0 && (rec->status == NGX_HTTP_NO_CONTENT
                                || rec->status == NGX_HTTP_NOT_MODIFIED))
        ? -1 : (off_t) rec->body.len;

    completed = 0;
    kv = rec->headers.elts;

    for (i = 0; i < rec->headers.nelts; i++) {

        if (kv[i].key.len == ngx_http_idempotency_status.len
            && ngx_strncmp(kv[i].key.data, ngx_http_idempotency_status.data,
                           kv[i].key.len) == 0)
        {
            r->headers_out.status_line = kv[i].value;
            continue;
        }

        /*
         * the answer to a HEAD: the length its header was sent with, for
         * a HEAD only (without fingerprints, another method may come with
         * the key, and gets the record's empty body)
         */

        if (kv[i].key.len == ngx_http_idempotency_length.len
            && ngx_strncmp(kv[i].key.data, ngx_http_idempotency_length.data,
                           kv[i].key.len) == 0)
        {
            if (r->method == NGX_HTTP_HEAD) {
                r->headers_out.content_length_n = kv[i].value.len
                    ? ngx_atoof(kv[i].value.data, kv[i].value.len) : -1;
            }

            continue;
        }

        if (kv[i].key.len == ngx_http_idempotency_location.len
            && ngx_strncmp(kv[i].key.data, ngx_http_idempotency_location.data,
                           kv[i].key.len) == 0)
        {
            completed = 1;
            continue;
        }

        /* the record's array lives as long as the replay */

        if (kv[i].key.len == ngx_http_idempotency_override.len
            && ngx_strncmp(kv[i].key.data, ngx_http_idempotency_override.data,
                           kv[i].key.len) == 0)
        {
            r->headers_out.override_charset = &kv[i].value;
            continue;
        }

        if (kv[i].key.len == ngx_http_idempotency_content_type.len
            && ngx_strncasecmp(kv[i].key.data,
                               ngx_http_idempotency_content_type.data,
                               kv[i].key.len) == 0)
        {
            ngx_http_idempotency_content_type_apply(r, &kv[i].value);
            continue;
        }

        h = ngx_http_idempotency_push_field(&r->headers_out.headers, &kv[i]);
        if (h == NULL) {
            return NGX_ERROR;
        }

        /*
         * Location as nginx's upstream leaves it: r->headers_out.location
         * points to a relative one only if the first answer's did (it was
         * rewritten, and the header filter made it absolute), and to any
         * other, which the header filter leaves alone
         */

        if (h->key.len == sizeof("Location") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "Location",
                               h->key.len) == 0)
        {
            if (completed
                || (h->value.len && h->value.data[0] != '/'))
            {
                r->headers_out.location = h;
            }

            completed = 0;
            continue;
        }

        if (ngx_http_idempotency_out_header(r, h) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_http_idempotency_trailers_apply(r, rec);
}


/* a record's field as a live header of list (pointing into the record) */

static ngx_table_elt_t *
ngx_http_idempotency_push_field(ngx_list_t *list, ngx_keyval_t *kv)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(list);
    if (h == NULL) {
        return NULL;
    }

    h->hash = 1;
    h->key = kv->key;
    h->value = kv->value;
    h->lowcase_key = NULL;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return h;
}


/*
 * The trailers, in their order, as the upstream passes them on; a
 * response that has them goes without Content-Length (chunked over
 * HTTP/1.1, as nginx frames any response with trailers), and over
 * HTTP/2 its header does not end the stream.
 */

static ngx_int_t
ngx_http_idempotency_trailers_apply(ngx_http_request_t *r,
    ngx_http_idempotency_record_t *rec)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (rec->trailers.nelts == 0 || r->method == NGX_HTTP_HEAD) {
        return NGX_OK;
    }

    kv = rec->trailers.elts;

    for (i = 0; i < rec->trailers.nelts; i++) {
        if (ngx_http_idempotency_push_field(&r->headers_out.trailers, &kv[i])
            == NULL)
        {
            return NGX_ERROR;
        }
    }

    r->headers_out.content_length_n = -1;
    r->expect_trailers = 1;

    return NGX_OK;
}


/*
 * Content-Type as nginx's upstream copies it: content_type_len ends
 * before the ";" of a charset parameter, and charset is that parameter's
 * value (unquoted), so that the *_types directives and the charset
 * filter see a replay's type as they saw the first answer's.
 */

static void
ngx_http_idempotency_content_type_apply(ngx_http_request_t *r,
    ngx_str_t *value)
{
    u_char  *p, *semi, *last;

    r->headers_out.content_type = *value;
    r->headers_out.content_type_len = value->len;
    r->headers_out.content_type_lowcase = NULL;
    ngx_str_null(&r->headers_out.charset);

    p = value->data;
    last = value->data + value->len;

    while (p < last) {

        if (*p++ != ';') {
            continue;
        }

        semi = p - 1;

        while (p < last && *p == ' ') {
            p++;
        }

        if ((size_t) (last - p) < sizeof("charset=") - 1) {
            return;
        }

        if (ngx_strncasecmp(p, (u_char *) "charset=", sizeof("charset=") - 1)
            != 0)
        {
            /* the upstream looks for the next ";" after this character */
            p++;
            continue;
        }

        p += sizeof("charset=") - 1;

        r->headers_out.content_type_len = semi - value->data;

        if (p < last && *p == '"') {
            p++;
        }

        if (last > p && *(last - 1) == '"') {
            last--;
        }

        r->headers_out.charset.len = last - p;
        r->headers_out.charset.data = p;

        return;
    }
}


/* the r->headers_out pointer of h, if nginx's upstream sets one */

static ngx_int_t
ngx_http_idempotency_out_header(ngx_http_request_t *r, ngx_table_elt_t *h)
{
    ngx_http_idempotency_out_header_t  *oh;
    ngx_table_elt_t                   **ph;
#if !(nginx_version >= 1023000)
    ngx_array_t                        *pa;
#endif

    for (oh = ngx_http_idempotency_out_headers; oh->name.len; oh++) {
        if (oh->name.len == h->key.len
            && ngx_strncasecmp(oh->name.data, h->key.data, h->key.len) == 0)
        {
            break;
        }
    }

    if (oh->name.len == 0) {
        return NGX_OK;
    }

    if (!oh->multi) {
        ph = (ngx_table_elt_t **) ((char *) &r->headers_out + oh->offset);
        *ph = h;

        if (ph == &r->headers_out.last_modified) {
            r->headers_out.last_modified_time =
                               ngx_parse_http_time(h->value.data, h->value.len);
        }

        return NGX_OK;
    }

#if (nginx_version >= 1023000)

    /* the repeated headers are a list, in their order */

    for (ph = (ngx_table_elt_t **) ((char *) &r->headers_out + oh->offset);
         *ph;
         ph = &(*ph)->next)
    {
        /* void */
    }

    *ph = h;

#else

    pa = (ngx_array_t *) ((char *) &r->headers_out + oh->offset);

    if (pa->elts == NULL) {
        if (ngx_array_init(pa, r->pool, 2, sizeof(ngx_table_elt_t *))
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    ph = ngx_array_push(pa);
    if (ph == NULL) {
        return NGX_ERROR;
    }

    *ph = h;

#endif

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_record_validate(ngx_http_idempotency_record_t *rec,
    const char **why)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (rec->status < 100 || rec->status > 599) {
        *why = "a status outside 100-599";
        return NGX_ERROR;
    }

    kv = rec->headers.elts;

    for (i = 0; i < rec->headers.nelts; i++) {
        *why = ngx_http_idempotency_header_bad(&kv[i].key, &kv[i].value);

        if (*why) {
            return NGX_ERROR;
        }
    }

    kv = rec->trailers.elts;

    for (i = 0; i < rec->trailers.nelts; i++) {
        *why = ngx_http_idempotency_trailer_bad(&kv[i].key, &kv[i].value);

        if (*why) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a trailer: what a header may be, but never a pseudo-header */

static const char *
ngx_http_idempotency_trailer_bad(ngx_str_t *name, ngx_str_t *value)
{
    if (name->len && name->data[0] == ':') {
        return "a pseudo-header among the trailers";
    }

    return ngx_http_idempotency_header_bad(name, value);
}


/* the record's own names, as the module spells them: bytes, not case */

static ngx_inline ngx_uint_t
ngx_http_idempotency_name_is(ngx_str_t *name, ngx_str_t *known)
{
    return name->len == known->len
           && ngx_strncmp(name->data, known->data, known->len) == 0;
}


/* NULL, or why the header may not be stored nor replayed */

static const char *
ngx_http_idempotency_header_bad(ngx_str_t *name, ngx_str_t *value)
{
    u_char  c;
    size_t  j;

    static ngx_str_t  content_type = ngx_string("Content-Type");
    static ngx_str_t  status_line = ngx_string(":status");

    /* format 2's fields: a length of decimal digits, or none; a mark */

    if (ngx_http_idempotency_name_is(name, &ngx_http_idempotency_length)) {
        if (value->len > NGX_OFF_T_LEN - 1) {
            return "a \":length\" that is too long";
        }

        for (j = 0; j < value->len; j++) {
            if (value->data[j] < '0' || value->data[j] > '9') {
                return "a \":length\" that is not a number";
            }
        }

        return NULL;
    }

    if (ngx_http_idempotency_name_is(name, &ngx_http_idempotency_location)) {
        return value->len ? "a \":location\" with a value" : NULL;
    }

    /*
     * the module's own names need no checks: Content-Type, spelt so, is
     * a token and allowed below, and every response asks this of it
     * twice (a byte compare here, not a caseless one and a token scan)
     */

    if (!ngx_http_idempotency_name_is(name, &status_line)
        && !ngx_http_idempotency_name_is(name, &ngx_http_idempotency_override)
        && !ngx_http_idempotency_name_is(name,
                                         &ngx_http_idempotency_content_type))
    {
        if (name->len == 0) {
            return "an empty header name";
        }

        for (j = 0; j < name->len; j++) {
            c = name->data[j];

            /* RFC 9110 tchar */
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9')
                  || ngx_strlchr((u_char *) "!#$%&'*+-.^_`|~",
                                 (u_char *) "!#$%&'*+-.^_`|~" + 15, c)))
            {
                return "a header name that is not a token";
            }
        }

        /* Content-Type is recorded apart from the list, and allowed */

        if (!(name->len == content_type.len
              && ngx_strncasecmp(name->data, content_type.data,
                                 content_type.len) == 0)
            && ngx_http_idempotency_skip(NULL, name))
        {
            return "a header that nginx makes itself or that frames the "
                   "message";
        }
    }

    for (j = 0; j < value->len; j++) {
        c = value->data[j];

        if (c == CR || c == LF || c == '\0') {
            return "a header value with CR, LF or NUL";
        }
    }

    return NULL;
}


static ngx_uint_t
ngx_http_idempotency_skip(ngx_array_t *skip, ngx_str_t *name)
{
    ngx_str_t   *s;
    ngx_uint_t   i;

    for (s = ngx_http_idempotency_skip_headers; s->len; s++) {
        if (s->len == name->len
            && ngx_strncasecmp(s->data, name->data, s->len) == 0)
        {
            return 1;
        }
    }

    if (skip == NULL) {
        return 0;
    }

    s = skip->elts;

    for (i = 0; i < skip->nelts; i++) {
        if (s[i].len == name->len
            && ngx_strncasecmp(s[i].data, name->data, s[i].len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* the module's formats (record, entry, issued key) are big-endian */

u_char *
ngx_http_idempotency_put_be(u_char *p, uint64_t v, size_t n)
{
    while (n--) {
        *p++ = (u_char) (v >> (8 * n));
    }

    return p;
}


uint64_t
ngx_http_idempotency_get_be(u_char *p, size_t n)
{
    uint64_t  v;

    v = 0;

    while (n--) {
        v = (v << 8) | *p++;
    }

    return v;
}


ngx_table_elt_t *
ngx_http_idempotency_next_header(ngx_list_part_t **part, ngx_uint_t *i)
{
    ngx_table_elt_t  *h;

    while (*i >= (*part)->nelts) {
        if ((*part)->next == NULL) {
            return NULL;
        }

        *part = (*part)->next;
        *i = 0;
    }

    h = (*part)->elts;

    return &h[(*i)++];
}
