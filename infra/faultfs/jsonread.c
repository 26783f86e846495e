/*
 * jbodlab-faultfs: a minimal JSON reader for control requests, accepting what Python's
 * json.loads accepts (NaN, Infinity, surrogate escapes) and failing with its messages. The
 * writer is jsonwrite.c.
 */
#define _GNU_SOURCE
#include "jsonio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32        /* deepest JSON nesting accepted in a request */

struct jparse {
    const char *p, *start, *end;
    const char *err;
    int depth;
};

void jfree(struct jv *v)
{
    while (v) {
        struct jv *next = v->next;
        jfree(v->first);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

static void jws(struct jparse *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jlit(struct jparse *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) >= n && memcmp(j->p, lit, n) == 0) {
        j->p += n;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static char *jstring(struct jparse *j, size_t *len, int *bad) /* at the opening quote */
{
    struct sbuf b = {0};
    j->p++;
    sb_put(&b, "", 0);
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            j->err = "Invalid control character";
            goto fail;
        }
        if (c != '\\') {
            sb_put(&b, j->p++, 1);
            continue;
        }
        if (j->end - j->p < 2) {
            j->err = "Unterminated string";
            goto fail;
        }
        char e = j->p[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            sb_put(&b, &map[simple - "\"\\/bfnrt"], 1);
            j->p += 2;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || j->end - j->p < 6 || !hex4(j->p + 2, &cp)) {
            j->err = "Invalid \\escape";
            goto fail;
        }
        j->p += 6;
        if (cp >= 0xd800 && cp <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u'
            && hex4(j->p + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            j->p += 6;
        } else if (cp >= 0xdc80 && cp <= 0xdcff) { /* surrogateescape: the raw byte */
            char raw = (char)(cp & 0xff);
            sb_put(&b, &raw, 1);
            continue;
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            *bad = 1;
            cp = 0xfffd;
        }
        if (cp == 0)
            *bad = 1;
        char u[4];
        int n;
        if (cp < 0x80)
            u[0] = (char)cp, n = 1;
        else if (cp < 0x800)
            u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
        else if (cp < 0x10000)
            u[0] = (char)(0xe0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
            u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
        else
            u[0] = (char)(0xf0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
        sb_put(&b, u, (size_t)n);
    }
    if (j->p >= j->end) {
        j->err = "Unterminated string";
        goto fail;
    }
    j->p++;
    *len = b.len;
    return b.s;
fail:
    free(b.s);
    return NULL;
}

static struct jv *jvalue(struct jparse *j);

static struct jv *jcontainer(struct jparse *j, struct jv *v, char close)
{
    if (++j->depth > MAX_DEPTH) {
        j->err = "nesting too deep";
        goto fail;
    }
    j->p++;
    jws(j);
    struct jv **tail = &v->first;
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        jws(j);
        if (close == '}') {
            size_t klen;
            int kbad = 0;
            if (j->p >= j->end || *j->p != '"') {
                j->err = "Expecting property name enclosed in double quotes";
                goto fail;
            }
            if (!(key = jstring(j, &klen, &kbad)))
                goto fail;
            jws(j);
            if (j->p >= j->end || *j->p != ':') {
                free(key);
                j->err = "Expecting ':' delimiter";
                goto fail;
            }
            j->p++;
        }
        struct jv *item = jvalue(j);
        if (!item) {
            free(key);
            goto fail;
        }
        item->key = key;
        *tail = item;
        tail = &item->next;
        jws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            j->depth--;
            return v;
        }
        j->err = "Expecting ',' delimiter";
        goto fail;
    }
fail:
    jfree(v);
    return NULL;
}

static struct jv *jvalue(struct jparse *j)
{
    jws(j);
    struct jv *v = calloc(1, sizeof *v);
    if (!v) {
        j->err = "out of memory";
        return NULL;
    }
    if (j->p >= j->end)
        goto expecting;
    switch (*j->p) {
    case '{':
        v->t = J_OBJ;
        return jcontainer(j, v, '}');
    case '[':
        v->t = J_ARR;
        return jcontainer(j, v, ']');
    case '"':
        v->t = J_STR;
        if (!(v->str = jstring(j, &v->len, &v->bad)))
            goto fail;
        return v;
    }
    if (jlit(j, "null"))
        v->t = J_NULL;
    else if (jlit(j, "true"))
        v->t = J_TRUE;
    else if (jlit(j, "false"))
        v->t = J_FALSE;
    else if (jlit(j, "NaN"))
        v->t = J_NUM, v->num = NAN, v->tok = "nan", v->toklen = 3;
    else if (jlit(j, "Infinity"))
        v->t = J_NUM, v->num = INFINITY, v->tok = "inf", v->toklen = 3;
    else if (jlit(j, "-Infinity"))
        v->t = J_NUM, v->num = -INFINITY, v->tok = "-inf", v->toklen = 4;
    else { /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
        const char *s = j->p, *p = s;
        if (p < j->end && *p == '-')
            p++;
        if (p >= j->end || *p < '0' || *p > '9')
            goto expecting;
        if (*p == '0')
            p++;
        else
            while (p < j->end && *p >= '0' && *p <= '9')
                p++;
        v->is_int = 1;
        if (p + 1 < j->end && *p == '.' && p[1] >= '0' && p[1] <= '9') {
            v->is_int = 0;
            for (p++; p < j->end && *p >= '0' && *p <= '9'; p++)
                ;
        }
        if (p < j->end && (*p == 'e' || *p == 'E')) {
            const char *q = p + 1;
            if (q < j->end && (*q == '+' || *q == '-'))
                q++;
            if (q < j->end && *q >= '0' && *q <= '9') {
                v->is_int = 0;
                for (p = q; p < j->end && *p >= '0' && *p <= '9'; p++)
                    ;
            }
        }
        char tmp[64];
        size_t n = (size_t)(p - s);
        v->t = J_NUM;
        v->tok = s;
        v->toklen = n;
        if (n >= sizeof tmp) { /* a long literal: only its float value matters */
            char *big = strndup(s, n);
            if (!big)
                goto expecting;
            v->num = strtod(big, NULL);
            free(big);
        } else {
            memcpy(tmp, s, n);
            tmp[n] = '\0';
            v->num = strtod(tmp, NULL);
            if (v->is_int) {
                errno = 0;
                v->ival = strtoll(tmp, NULL, 10);
                v->int_ok = errno == 0;
            }
        }
        j->p = p;
    }
    return v;
expecting:
    j->err = "Expecting value";
fail:
    jfree(v);
    return NULL;
}

struct jv *jparse(const char *s, size_t n, struct sbuf *err)
{
    struct jparse j = {s, s, s + n, NULL, 0};
    struct jv *v = jvalue(&j);
    if (v) {
        jws(&j);
        if (j.p < j.end) {
            jfree(v);
            v = NULL;
            j.err = "Extra data";
        }
    }
    if (!v)
        sb_printf(err, "JSONDecodeError: %s: line 1 column %ld (char %ld)", j.err ? j.err : "?",
                  (long)(j.p - s) + 1, (long)(j.p - s));
    return v;
}

struct jv *jget(const struct jv *obj, const char *key) /* the last member of that name */
{
    struct jv *found = NULL;
    for (struct jv *m = obj->first; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0)
            found = m;
    return found;
}

int jtruthy(const struct jv *v)
{
    if (!v)
        return 0;
    switch (v->t) {
    case J_NULL: case J_FALSE: return 0;
    case J_TRUE: return 1;
    case J_NUM: return v->num != 0;
    case J_STR: return v->len > 0;
    default: return v->first != NULL;
    }
}
