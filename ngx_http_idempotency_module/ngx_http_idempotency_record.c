
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


static ngx_int_t ngx_http_idempotency_head_size(ngx_http_request_t *r,
    ngx_array_t *skip, size_t *lenp, ngx_uint_t *np, size_t *ctlenp);
static u_char *ngx_http_idempotency_put_field(u_char *p, ngx_str_t *name,
    u_char *value, size_t len);
static ngx_uint_t ngx_http_idempotency_skip(ngx_array_t *skip,
    ngx_str_t *name);
static const char *ngx_http_idempotency_header_bad(ngx_str_t *name,
    ngx_str_t *value);


static ngx_str_t  ngx_http_idempotency_content_type =
    ngx_string("Content-Type");
static ngx_str_t  ngx_http_idempotency_status = ngx_string(":status");


ngx_int_t
ngx_http_idempotency_record_head(ngx_http_request_t *r, ngx_pool_t *pool,
    ngx_array_t *skip, ngx_str_t *out)
{
    u_char           *p;
    size_t            len, ctlen;
    ngx_int_t         rc;
    ngx_uint_t        i, n;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    rc = ngx_http_idempotency_head_size(r, skip, &len, &n, &ctlen);

    if (rc != NGX_OK) {
        return rc;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    out->len = len;

    p = ngx_cpymem(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC,
                   sizeof(NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC) - 1);
    p = ngx_http_idempotency_put_be(p, r->headers_out.status, 2);
    p = ngx_http_idempotency_put_be(p, n, 2);

    if (r->headers_out.status_line.len) {
        p = ngx_http_idempotency_put_field(p, &ngx_http_idempotency_status,
                                           r->headers_out.status_line.data,
                                           r->headers_out.status_line.len);
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

        p = ngx_http_idempotency_put_field(p, &h->key, h->value.data,
                                           h->value.len);
    }

    return NGX_OK;
}


/*
 * The size of the head and its number of fields, and the length of the
 * Content-Type value: NGX_DECLINED for what no replay may send (only
 * what ngx_http_idempotency_record_validate() will let through), NGX_ERROR
 * for what the format cannot frame.
 */

static ngx_int_t
ngx_http_idempotency_head_size(ngx_http_request_t *r, ngx_array_t *skip,
    size_t *lenp, ngx_uint_t *np, size_t *ctlenp)
{
    size_t            len, ctlen;
    ngx_uint_t        i, n;
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

        if (ngx_http_idempotency_header_bad(&h->key, &h->value)) {
            return NGX_DECLINED;
        }

        /* the format frames names in 16 bits and values in 32 */

        if (h->key.len > 0xffff || h->value.len > 0xffffffff) {
            return NGX_ERROR;
        }

        len += 2 + h->key.len + 4 + h->value.len;
        n++;
    }

    if (n > 0xffff) {
        return NGX_ERROR;
    }

    *lenp = len;
    *np = n;
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


void
ngx_http_idempotency_record_body_len(u_char *p, size_t len)
{
    (void) ngx_http_idempotency_put_be(p, len, 4);
}


ngx_int_t
ngx_http_idempotency_record_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_http_idempotency_record_t *rec)
{
    u_char        *p, *last;
    size_t         size;
    ngx_uint_t     i, n;
    ngx_keyval_t  *kv;

    p = data;
    last = data + len;

#define ngx_http_idempotency_need(k)                                         \
    if ((size_t) (last - p) < (size_t) (k)) {                                \
        return NGX_ERROR;                                                    \
    }

    ngx_http_idempotency_need(8);

    if (ngx_memcmp(p, NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC, 4) != 0) {
        return NGX_ERROR;
    }

    rec->status = ngx_http_idempotency_get_be(p + 4, 2);
    n = ngx_http_idempotency_get_be(p + 6, 2);
    p += 8;

    if (rec->status < 100 || rec->status > 999) {
        return NGX_ERROR;
    }

    /* a header takes 7 bytes at least: no allocation for a count the
     * record cannot hold */

    if (n > (size_t) (last - p) / 7) {
        return NGX_ERROR;
    }

    if (ngx_array_init(&rec->headers, pool, n ? n : 1, sizeof(ngx_keyval_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        kv = ngx_array_push(&rec->headers);
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

    ngx_http_idempotency_need(4);
    size = ngx_http_idempotency_get_be(p, 4);
    p += 4;

    if ((size_t) (last - p) != size) {
        return NGX_ERROR;
    }

#undef ngx_http_idempotency_need

    rec->body.data = p;
    rec->body.len = size;

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_record_apply(ngx_http_request_t *r,
    ngx_http_idempotency_record_t *rec)
{
    ngx_uint_t        i;
    ngx_keyval_t     *kv;
    ngx_table_elt_t  *h;

    r->headers_out.status = rec->status;

    /* a response that has no body replays as it came: without the
     * Content-Length that the backend never sent */

    r->headers_out.content_length_n =
        (rec->body.len == 0 && (rec->status == NGX_HTTP_NO_CONTENT
                                || rec->status == NGX_HTTP_NOT_MODIFIED))
        ? -1 : (off_t) rec->body.len;

    kv = rec->headers.elts;

    for (i = 0; i < rec->headers.nelts; i++) {

        if (kv[i].key.len == sizeof(":status") - 1
            && ngx_strncmp(kv[i].key.data, ":status", kv[i].key.len) == 0)
        {
            r->headers_out.status_line = kv[i].value;
            continue;
        }

        if (kv[i].key.len == sizeof("Content-Type") - 1
            && ngx_strncasecmp(kv[i].key.data, (u_char *) "Content-Type",
                               kv[i].key.len) == 0)
        {
            r->headers_out.content_type = kv[i].value;
            r->headers_out.content_type_len = kv[i].value.len;
            continue;
        }

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = kv[i].key;
        h->value = kv[i].value;
        h->lowcase_key = NULL;

        /*
         * the pointers later filters look at, set as upstream sets them:
         * a relative Location is left out of headers_out.location so
         * that the header filter does not make it absolute
         */

        if (h->key.len == sizeof("Location") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "Location",
                               h->key.len) == 0)
        {
            if (h->value.len && h->value.data[0] != '/') {
                r->headers_out.location = h;
            }

        } else if (h->key.len == sizeof("Content-Encoding") - 1
                   && ngx_strncasecmp(h->key.data,
                                      (u_char *) "Content-Encoding",
                                      h->key.len) == 0)
        {
            r->headers_out.content_encoding = h;

        } else if (h->key.len == sizeof("ETag") - 1
                   && ngx_strncasecmp(h->key.data, (u_char *) "ETag",
                                      h->key.len) == 0)
        {
            r->headers_out.etag = h;

        } else if (h->key.len == sizeof("Last-Modified") - 1
                   && ngx_strncasecmp(h->key.data,
                                      (u_char *) "Last-Modified",
                                      h->key.len) == 0)
        {
            r->headers_out.last_modified = h;
        }
    }

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

    return NGX_OK;
}


/* NULL, or why the header may not be stored nor replayed */

static const char *
ngx_http_idempotency_header_bad(ngx_str_t *name, ngx_str_t *value)
{
    u_char  c;
    size_t  j;

    static ngx_str_t  content_type = ngx_string("Content-Type");
    static ngx_str_t  status_line = ngx_string(":status");

    if (!(name->len == status_line.len
          && ngx_strncmp(name->data, status_line.data, status_line.len) == 0))
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
