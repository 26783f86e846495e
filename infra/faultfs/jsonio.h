/*
 * jbodlab-faultfs: JSON reading and writing as Python's json module does, and a growable
 * string (jsonread.c reads, jsonwrite.c writes).
 */
#ifndef JBODLAB_JSONIO_H
#define JBODLAB_JSONIO_H

#include <stddef.h>
#include <stdint.h>

/* A growable string. */
struct sbuf {
    char *s;
    size_t len, cap;
};

void sb_put(struct sbuf *b, const char *s, size_t n);
void sb_puts(struct sbuf *b, const char *s);
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a JSON string as json.dumps writes it (ensure_ascii) */
void sb_json_str(struct sbuf *b, const char *s, size_t n);
/* a float as repr() (json=0) or json.dumps (json=1) writes it */
void sb_pyfloat(struct sbuf *b, double x, int json);

enum jtype { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    enum jtype t;
    double num;
    int is_int;           /* J_NUM written without fraction or exponent */
    int int_ok;           /* ... and it fits ival */
    long long ival;
    const char *tok;      /* J_NUM: its text */
    size_t toklen;
    char *str;            /* J_STR: decoded UTF-8, NUL-terminated */
    size_t len;
    int bad;              /* J_STR holds NUL or a lone surrogate: never a usable name */
    char *key;            /* member name inside an object */
    struct jv *first, *next;
};

/* jsonread.c: parse one request line; NULL with a json.JSONDecodeError-like text in err */
struct jv *jparse(const char *s, size_t n, struct sbuf *err);
void jfree(struct jv *v);
struct jv *jget(const struct jv *obj, const char *key);   /* the last member of that name */
int jtruthy(const struct jv *v);
/* jsonwrite.c: Python's repr() of a value */
void sb_repr(struct sbuf *b, const struct jv *v);

#endif
