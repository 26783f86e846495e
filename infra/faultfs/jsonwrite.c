/*
 * jbodlab-faultfs: text out, the way Python writes it — a growable string, JSON strings as
 * json.dumps writes them, floats as repr() and json.dumps write them, and repr() of a parsed
 * value for error messages (the control protocol's replies must be byte for byte those of
 * infra/fusefs.py). The reader is jsonread.c.
 */
#define _GNU_SOURCE
#include "jsonio.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
