
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the sources of "idempotency_key", the
 * body's fields read in pieces, and the key composed of them.
 *
 * Nothing here knows the request: keysrc.c evaluates the complex values
 * and hands the body over; the fuzzer (fuzz/fuzz_keyscan.c) drives this
 * file alone.  A JSON path is found by json.c; a form field
 * (application/x-www-form-urlencoded) by the small scanner below, which
 * decodes names and values as they stream by ("+" a space, "%XX" a byte,
 * a "%" without two hex digits itself, as the common form parsers do).
 */


#include "ngx_http_idempotency_keyscan.h"


/* the form scanner's states */
#define NGX_HTTP_IDEMPOTENCY_FORM_NAME   0
#define NGX_HTTP_IDEMPOTENCY_FORM_VALUE  1
#define NGX_HTTP_IDEMPOTENCY_FORM_SKIP   2    /* a value nobody reads */

/* a part's bytes kept: one more than a key part may have */
#define NGX_HTTP_IDEMPOTENCY_PART_KEEP   (NGX_HTTP_IDEMPOTENCY_KEY_MAX + 1)

/*
 * yajl reads a token cut by a piece's end again from its start with the
 * next piece: a long string in many small pieces would cost the square
 * of its length.  Pieces under this size are gathered first, in a stage
 * of this size, or of the size keyscan_expect() was told (the fuzzer
 * makes it small).
 */
#ifndef NGX_HTTP_IDEMPOTENCY_STAGE
#define NGX_HTTP_IDEMPOTENCY_STAGE       (64 * 1024)
#endif


/* what the body gave a path or a field */
typedef struct {
    ngx_uint_t                          count;     /* times found */
    ngx_uint_t                          kind;      /* JSON_* */
    u_char                             *data;      /* PART_KEEP bytes */
    size_t                              len;       /* up to PART_KEEP */
} ngx_http_idempotency_found_t;


struct ngx_http_idempotency_keyscan_s {
    ngx_pool_t                         *pool;
    ngx_http_idempotency_keysrc_t      *conf;
    ngx_http_idempotency_json_t        *json;
    off_t                               size;      /* bytes seen */
    u_char                             *stage;     /* small pieces */
    size_t                              staged;
    size_t                              stage_size;

    ngx_http_idempotency_found_t       *paths;     /* by JSON path */
    ngx_http_idempotency_found_t       *fields;    /* by form field */

    /* the form scanner */
    ngx_uint_t                          state;
    ngx_uint_t                          pct;       /* hex digits after % */
    u_char                              hex;       /* the first of them */
    u_char                             *name;      /* decoded so far */
    size_t                              name_len;  /* up to name_max + 1 */
    size_t                              name_max;
    ngx_http_idempotency_found_t       *target;    /* the value's field */
};


static ngx_int_t ngx_http_idempotency_keyscan_json(
    ngx_http_idempotency_keyscan_t *scan, u_char *p, size_t len);
static void ngx_http_idempotency_keyscan_found(void *data, ngx_uint_t i,
    ngx_uint_t kind, u_char *p, size_t len);
static ngx_int_t ngx_http_idempotency_keyscan_keep(ngx_pool_t *pool,
    ngx_http_idempotency_found_t *f, u_char *p, size_t len);
static ngx_int_t ngx_http_idempotency_form_byte(
    ngx_http_idempotency_keyscan_t *scan, u_char c);
static ngx_int_t ngx_http_idempotency_form_char(
    ngx_http_idempotency_keyscan_t *scan, u_char c);
static ngx_int_t ngx_http_idempotency_form_sep(
    ngx_http_idempotency_keyscan_t *scan, u_char c);
static ngx_int_t ngx_http_idempotency_keyscan_why(ngx_pool_t *pool,
    ngx_str_t *why, const char *text, ngx_str_t *more, const char *tail);


static const char  *ngx_http_idempotency_json_kinds[] = {
    "a string", "a number", "an object", "an array", "null", "a boolean"
};


ngx_int_t
ngx_http_idempotency_source_parse(ngx_pool_t *pool,
    ngx_http_idempotency_keysrc_t *conf, ngx_str_t *text, const char **err)
{
    ngx_int_t                       rc;
    ngx_str_t                       arg;
    ngx_uint_t                      i;
    ngx_http_idempotency_source_t  *src;

    if (conf->nsources == NGX_HTTP_IDEMPOTENCY_SOURCES) {
        *err = "more than 8 sources";
        return NGX_ABORT;
    }

    for (i = 0; i < conf->nsources; i++) {
        if (conf->sources[i].name.len == text->len
            && ngx_memcmp(conf->sources[i].name.data, text->data, text->len)
               == 0)
        {
            *err = "the same source twice";
            return NGX_ABORT;
        }
    }

    src = &conf->sources[conf->nsources];

    if (text->len >= 5 && ngx_strncmp(text->data, "json=", 5) == 0) {
        arg.data = text->data + 5;
        arg.len = text->len - 5;

        rc = ngx_http_idempotency_json_path(pool, &arg,
                                            &conf->paths[conf->npaths], err);
        if (rc != NGX_OK) {
            return rc == NGX_DECLINED ? NGX_ABORT : NGX_ERROR;
        }

        src->type = NGX_HTTP_IDEMPOTENCY_SRC_JSON;
        src->n = conf->npaths++;

    } else if (text->len >= 5 && ngx_strncmp(text->data, "form=", 5) == 0) {
        arg.data = text->data + 5;
        arg.len = text->len - 5;

        if (arg.len == 0) {
            *err = "the form field's name is empty";
            return NGX_ABORT;
        }

        conf->fields[conf->nfields] = arg;
        src->type = NGX_HTTP_IDEMPOTENCY_SRC_FORM;
        src->n = conf->nfields++;

    } else {
        return NGX_DECLINED;
    }

    src->name = *text;
    src->value = NULL;
    conf->nsources++;

    return NGX_OK;
}


ngx_http_idempotency_keyscan_t *
ngx_http_idempotency_keyscan_create(ngx_pool_t *pool,
    ngx_http_idempotency_keysrc_t *conf)
{
    ngx_uint_t                       i;
    ngx_http_idempotency_keyscan_t  *scan;

    scan = ngx_pcalloc(pool, sizeof(ngx_http_idempotency_keyscan_t));
    if (scan == NULL) {
        return NULL;
    }

    scan->pool = pool;
    scan->conf = conf;

    scan->paths = ngx_pcalloc(pool, (conf->npaths + conf->nfields)
                                    * sizeof(ngx_http_idempotency_found_t)
                                    + 1);
    if (scan->paths == NULL) {
        return NULL;
    }

    scan->fields = scan->paths + conf->npaths;

    if (conf->npaths) {
        scan->json = ngx_http_idempotency_json_create(pool, conf->paths,
                                          conf->npaths,
                                          ngx_http_idempotency_keyscan_found,
                                          scan);
        if (scan->json == NULL) {
            return NULL;
        }
    }

    for (i = 0; i < conf->nfields; i++) {
        scan->name_max = ngx_max(scan->name_max, conf->fields[i].len);
    }

    if (conf->nfields) {
        scan->name = ngx_pnalloc(pool, scan->name_max + 1);
        if (scan->name == NULL) {
            return NULL;
        }
    }

    return scan;
}


ngx_int_t
ngx_http_idempotency_keyscan_feed(void *data, u_char *p, size_t len)
{
    ngx_http_idempotency_keyscan_t  *scan = data;

    u_char  *last;

    scan->size += len;

    /* over the limit, the body is refused whatever it holds */

    if (scan->size > (off_t) scan->conf->max_body) {
        return NGX_OK;
    }

    if (scan->json
        && ngx_http_idempotency_keyscan_json(scan, p, len) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (scan->conf->nfields) {
        for (last = p + len; p < last; p++) {
            if (ngx_http_idempotency_form_byte(scan, *p) != NGX_OK) {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_keyscan_end(ngx_http_idempotency_keyscan_t *scan)
{
    if (scan->size == 0 || scan->size > (off_t) scan->conf->max_body) {
        return NGX_OK;
    }

    if (scan->json
        && (ngx_http_idempotency_keyscan_json(scan, NULL, 0) != NGX_OK
            || ngx_http_idempotency_json_end(scan->json) == NGX_ERROR))
    {
        return NGX_ERROR;
    }

    if (scan->conf->nfields) {

        /* a "%" or "%X" left pending, then the last field's end */

        while (scan->pct) {
            if (ngx_http_idempotency_form_byte(scan, '&') != NGX_OK) {
                return NGX_ERROR;
            }
        }

        return ngx_http_idempotency_form_byte(scan, '&');
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_keyscan_part(ngx_http_idempotency_keyscan_t *scan,
    ngx_http_idempotency_source_t *src, ngx_str_t *value, ngx_str_t *why)
{
    ngx_str_t                      err;
    ngx_http_idempotency_found_t  *f;

    if (scan->size == 0) {
        ngx_str_set(why, "the request has no body");
        return NGX_HTTP_IDEMPOTENCY_PART_MISSING;
    }

    if (scan->size > (off_t) scan->conf->max_body) {
        if (ngx_http_idempotency_keyscan_why(scan->pool, why,
                                "the request body is larger than max_body=",
                                &scan->conf->max_body_text, "")
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        return NGX_HTTP_IDEMPOTENCY_PART_BODY;
    }

    if (src->type == NGX_HTTP_IDEMPOTENCY_SRC_JSON) {
        ngx_http_idempotency_json_error(scan->json, &err);

        if (err.len) {
            if (ngx_http_idempotency_keyscan_why(scan->pool, why,
                                          "the request body is not JSON: ",
                                          &err, "")
                != NGX_OK)
            {
                return NGX_ERROR;
            }

            return NGX_HTTP_IDEMPOTENCY_PART_BODY;
        }

        f = &scan->paths[src->n];

    } else {
        f = &scan->fields[src->n];
    }

    if (f->count == 0) {
        ngx_str_set(why, "not in the request body");
        return NGX_HTTP_IDEMPOTENCY_PART_MISSING;
    }

    if (f->count > 1) {
        ngx_str_set(why, "more than once in the request body");
        return NGX_HTTP_IDEMPOTENCY_PART_INVALID;
    }

    if (f->kind != NGX_HTTP_IDEMPOTENCY_JSON_STRING
        && f->kind != NGX_HTTP_IDEMPOTENCY_JSON_NUMBER)
    {
        err.data = (u_char *) ngx_http_idempotency_json_kinds[f->kind];
        err.len = ngx_strlen(err.data);

        if (ngx_http_idempotency_keyscan_why(scan->pool, why, "is ", &err,
                                             ", not a string or a number")
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        return NGX_HTTP_IDEMPOTENCY_PART_INVALID;
    }

    value->data = f->data;
    value->len = f->len;

    return NGX_HTTP_IDEMPOTENCY_PART_OK;
}


ngx_int_t
ngx_http_idempotency_key_compose(ngx_pool_t *pool, ngx_str_t *parts,
    ngx_uint_t n, ngx_str_t *key, ngx_uint_t *bad, const char **why)
{
    u_char      *p, *last;
    size_t       len;
    ngx_uint_t   i;

    len = 0;

    for (i = 0; i < n; i++) {
        *bad = i;

        if (parts[i].len == 0) {
            *why = "is empty";
            return NGX_HTTP_IDEMPOTENCY_PART_MISSING;
        }

        if (parts[i].len > NGX_HTTP_IDEMPOTENCY_KEY_MAX) {
            *why = "is longer than 255 bytes";
            return NGX_HTTP_IDEMPOTENCY_PART_INVALID;
        }

        for (p = parts[i].data, last = p + parts[i].len; p < last; p++) {
            if (*p < 0x20 || *p == 0x7f) {
                *why = "has a control character";
                return NGX_HTTP_IDEMPOTENCY_PART_INVALID;
            }
        }

        len += parts[i].len + sizeof("255:,") - 1;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    key->data = p;

    for (i = 0; i < n; i++) {
        p = ngx_sprintf(p, "%uz:%V,", parts[i].len, &parts[i]);
    }

    key->len = p - key->data;

    return NGX_OK;
}


/*
 * A piece to the parser: a large one as it is, small ones gathered into
 * the stage first; p NULL: what is staged, at the body's end
 */

static ngx_int_t
ngx_http_idempotency_keyscan_json(ngx_http_idempotency_keyscan_t *scan,
    u_char *p, size_t len)
{
    if (p && len < NGX_HTTP_IDEMPOTENCY_STAGE) {

        if (scan->stage == NULL) {
            scan->stage_size = ngx_max(scan->stage_size,
                                       NGX_HTTP_IDEMPOTENCY_STAGE);

            scan->stage = ngx_pnalloc(scan->pool, scan->stage_size);
            if (scan->stage == NULL) {
                return NGX_ERROR;
            }
        }

        if (scan->stage_size - scan->staged < len
            && ngx_http_idempotency_keyscan_json(scan, NULL, 0) != NGX_OK)
        {
            return NGX_ERROR;
        }

        ngx_memcpy(scan->stage + scan->staged, p, len);
        scan->staged += len;

        return NGX_OK;
    }

    /* a large piece, or the end: what is staged goes first */

    if (scan->staged) {
        if (ngx_http_idempotency_json_feed(scan->json, scan->stage,
                                           scan->staged)
            == NGX_ERROR)
        {
            return NGX_ERROR;
        }

        scan->staged = 0;
    }

    if (p == NULL) {
        return NGX_OK;
    }

    return ngx_http_idempotency_json_feed(scan->json, p, len) == NGX_ERROR
           ? NGX_ERROR : NGX_OK;
}


void
ngx_http_idempotency_keyscan_expect(ngx_http_idempotency_keyscan_t *scan,
    size_t size)
{
    if (scan->stage == NULL) {
        scan->stage_size = ngx_min(size, scan->conf->max_body);
    }
}


/* json.c found a value at the end of path i */

static void
ngx_http_idempotency_keyscan_found(void *data, ngx_uint_t i, ngx_uint_t kind,
    u_char *p, size_t len)
{
    ngx_http_idempotency_keyscan_t  *scan = data;

    ngx_http_idempotency_found_t  *f;

    f = &scan->paths[i];

    if (f->count++) {
        return;
    }

    f->kind = kind;

    if (kind == NGX_HTTP_IDEMPOTENCY_JSON_STRING
        || kind == NGX_HTTP_IDEMPOTENCY_JSON_NUMBER)
    {
        /* no memory: taken as not found, and the scan goes on */
        if (ngx_http_idempotency_keyscan_keep(scan->pool, f, p, len)
            != NGX_OK)
        {
            f->count = 0;
        }
    }
}


static ngx_int_t
ngx_http_idempotency_keyscan_keep(ngx_pool_t *pool,
    ngx_http_idempotency_found_t *f, u_char *p, size_t len)
{
    if (f->data == NULL) {
        f->data = ngx_pnalloc(pool, NGX_HTTP_IDEMPOTENCY_PART_KEEP);
        if (f->data == NULL) {
            return NGX_ERROR;
        }
    }

    len = ngx_min(len, NGX_HTTP_IDEMPOTENCY_PART_KEEP - f->len);

    if (len) {
        ngx_memcpy(f->data + f->len, p, len);
        f->len += len;
    }

    return NGX_OK;
}


/* a raw byte of a form: percent-decoding across pieces */

static ngx_int_t
ngx_http_idempotency_form_byte(ngx_http_idempotency_keyscan_t *scan,
    u_char c)
{
    u_char  d, h;

    if (scan->pct == 0) {
        if (c == '%') {
            scan->pct = 1;
            return NGX_OK;
        }

        if (c == '&' || c == '=') {
            return ngx_http_idempotency_form_sep(scan, c);
        }

        return ngx_http_idempotency_form_char(scan, c == '+' ? ' ' : c);
    }

    d = (u_char) (c | 0x20);

    if (!((c >= '0' && c <= '9') || (d >= 'a' && d <= 'f'))) {

        /* not an escape: the "%" (and a first digit) as they came */

        h = scan->hex;
        scan->pct = 0;

        if (ngx_http_idempotency_form_char(scan, '%') != NGX_OK
            || (h && ngx_http_idempotency_form_char(scan, h) != NGX_OK))
        {
            return NGX_ERROR;
        }

        scan->hex = 0;

        return ngx_http_idempotency_form_byte(scan, c);
    }

    if (scan->pct == 1) {
        scan->pct = 2;
        scan->hex = c;
        return NGX_OK;
    }

    h = (u_char) (scan->hex | 0x20);
    h = (h >= 'a') ? h - 'a' + 10 : h - '0';
    d = (d >= 'a') ? d - 'a' + 10 : d - '0';

    scan->pct = 0;
    scan->hex = 0;

    return ngx_http_idempotency_form_char(scan, (u_char) (h << 4 | d));
}


/* a decoded byte of a name or a value */

static ngx_int_t
ngx_http_idempotency_form_char(ngx_http_idempotency_keyscan_t *scan,
    u_char c)
{
    switch (scan->state) {

    case NGX_HTTP_IDEMPOTENCY_FORM_NAME:
        if (scan->name_len <= scan->name_max) {
            scan->name[scan->name_len++] = c;
        }

        return NGX_OK;

    case NGX_HTTP_IDEMPOTENCY_FORM_VALUE:
        return ngx_http_idempotency_keyscan_keep(scan->pool, scan->target,
                                                 &c, 1);

    default:
        return NGX_OK;
    }
}


/* "=" ends a name, "&" a field; an "=" inside a value is the value's */

static ngx_int_t
ngx_http_idempotency_form_sep(ngx_http_idempotency_keyscan_t *scan,
    u_char c)
{
    ngx_uint_t                     i;
    ngx_http_idempotency_found_t  *f;

    if (scan->state == NGX_HTTP_IDEMPOTENCY_FORM_NAME) {

        f = NULL;

        for (i = 0; i < scan->conf->nfields; i++) {
            if (scan->conf->fields[i].len == scan->name_len
                && ngx_memcmp(scan->conf->fields[i].data, scan->name,
                              scan->name_len)
                   == 0)
            {
                f = &scan->fields[i];
                break;
            }
        }

        scan->name_len = 0;

        if (f && f->count++ == 0) {
            /* "name" alone is an empty value */
            f->kind = NGX_HTTP_IDEMPOTENCY_JSON_STRING;

            if (ngx_http_idempotency_keyscan_keep(scan->pool, f, NULL, 0)
                != NGX_OK)
            {
                return NGX_ERROR;
            }

            scan->target = f;
            scan->state = (c == '=') ? NGX_HTTP_IDEMPOTENCY_FORM_VALUE
                                     : NGX_HTTP_IDEMPOTENCY_FORM_NAME;
            return NGX_OK;
        }

        scan->state = (c == '=') ? NGX_HTTP_IDEMPOTENCY_FORM_SKIP
                                 : NGX_HTTP_IDEMPOTENCY_FORM_NAME;
        return NGX_OK;
    }

    if (c == '=') {
        return ngx_http_idempotency_form_char(scan, c);
    }

    scan->state = NGX_HTTP_IDEMPOTENCY_FORM_NAME;
    scan->target = NULL;

    return NGX_OK;
}


/* why = text . more . tail, in pool */

static ngx_int_t
ngx_http_idempotency_keyscan_why(ngx_pool_t *pool, ngx_str_t *why,
    const char *text, ngx_str_t *more, const char *tail)
{
    u_char  *p;

    p = ngx_pnalloc(pool, ngx_strlen(text) + more->len + ngx_strlen(tail));
    if (p == NULL) {
        return NGX_ERROR;
    }

    why->data = p;
    why->len = ngx_sprintf(p, "%s%V%s", text, more, tail) - p;

    return NGX_OK;
}
