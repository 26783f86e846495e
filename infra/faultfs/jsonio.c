/*
 * jbodlab-faultfs: JSON in and out, the way Python's json module reads and writes it (the
 * control protocol's replies must be byte for byte those of infra/fusefs.py), a growable
 * string, the clock and the log line. See faultfs.c.
 */
#define _GNU_SOURCE
#include "jsonio.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 32        /* deepest JSON nesting accepted in a request */

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One log line on stderr, formatted like the Python daemon's ("%(asctime)s fusefs LEVEL msg"). */
void logmsg(const char *level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - n, ",%03ld faultfs %s ", ts.tv_nsec / 1000000, level);
    va_list ap;
    va_start(ap, fmt);
    if (n < sizeof line)
        n += vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* "<backing>/<name>" into buf; -ENAMETOOLONG if it does not fit. */


void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *s2 = realloc(b->s, cap);
        if (!s2)
            abort(); /* out of memory: nothing sensible left to do */
        b->s = s2;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string as Python's json.dumps writes it (ensure_ascii): \uXXXX for everything
 * outside ' '..'~', bytes that are not UTF-8 as the surrogates Python decodes them to. */
void sb_json_str(struct sbuf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    sb_put(b, "\"", 1);
    while (p < end) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
            p++;
            continue;
        }
        if (c >= 0x20 && c < 0x7f) {
            sb_put(b, (const char *)p, 1);
            p++;
            continue;
        }
        const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) {
            sb_puts(b, esc);
            p++;
            continue;
        }
        uint32_t cp = c;
        int len = 1;
        if (c >= 0xc2 && c <= 0xdf)
            len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            len = 4, cp = c & 0x07;
        int ok = c < 0x80 || (len > 1 && p + len <= end);
        for (int i = 1; ok && i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                ok = 0;
            else
                cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (ok && len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            ok = 0;
        if (ok && len == 4 && (cp < 0x10000 || cp > 0x10ffff))
            ok = 0;
        if (!ok) { /* surrogateescape */
            cp = 0xdc00 | c;
            len = 1;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            sb_printf(b, "\\u%04x\\u%04x", 0xd800 | (cp >> 10), 0xdc00 | (cp & 0x3ff));
        } else {
            sb_printf(b, "\\u%04x", cp);
        }
        p += len;
    }
    sb_put(b, "\"", 1);
}

/* A float as Python's repr() (and json.dumps) writes it: shortest round trip, "1.0", "1e-05". */
void sb_pyfloat(struct sbuf *b, double x, int json)
{
    if (isnan(x)) {
        sb_puts(b, json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        sb_puts(b, x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
        return;
    }
    char tmp[48], digits[24];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    const char *p = tmp;
    if (*p == '-') {
        sb_put(b, "-", 1);
        p++;
    }
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                sb_put(b, i < nd ? &digits[i] : "0", 1);
            sb_put(b, ".", 1);
            if (nd > exp10 + 1)
                sb_puts(b, digits + exp10 + 1);
            else
                sb_put(b, "0", 1);
        } else {
            sb_puts(b, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                sb_put(b, "0", 1);
            sb_puts(b, digits);
        }
    } else {
        sb_put(b, digits, 1);
        if (nd > 1) {
            sb_put(b, ".", 1);
            sb_puts(b, digits + 1);
        }
        sb_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
}

/* ---- a minimal JSON reader for control requests ------------------------------------- */



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

/* Python's repr() of a JSON value, for error messages. */
void sb_repr(struct sbuf *b, const struct jv *v)
{
    if (!v || v->t == J_NULL) {
        sb_puts(b, "None");
        return;
    }
    switch (v->t) {
    case J_TRUE: sb_puts(b, "True"); return;
    case J_FALSE: sb_puts(b, "False"); return;
    case J_NUM:
        if (v->is_int)
            sb_put(b, v->tok, v->toklen);
        else
            sb_pyfloat(b, v->num, 0);
        return;
    case J_STR:
        sb_put(b, "'", 1);
        for (size_t i = 0; i < v->len; i++) {
            unsigned char c = (unsigned char)v->str[i];
            if (c == '\'' || c == '\\')
                sb_printf(b, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                sb_printf(b, "\\x%02x", c);
            else
                sb_put(b, &v->str[i], 1);
        }
        sb_put(b, "'", 1);
        return;
    default: {
        int obj = v->t == J_OBJ;
        sb_puts(b, obj ? "{" : "[");
        for (const struct jv *m = v->first; m; m = m->next) {
            if (m != v->first)
                sb_puts(b, ", ");
            if (obj) {
                struct jv k = {.t = J_STR, .str = m->key, .len = strlen(m->key)};
                sb_repr(b, &k);
                sb_puts(b, ": ");
            }
            sb_repr(b, m);
        }
        sb_puts(b, obj ? "}" : "]");
    }
    }
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
