/*
 * jbodlab-faultfs: the fault modes (the twin of infra/faultmodes.py) — their names, the mode
 * of a set request parsed and validated with Python's messages, its text for the log, and what
 * a mode decides about an op before any I/O: whether it always fails, whether it is in scope.
 */
#define _GNU_SOURCE
#include "mode.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const KIND_NAMES[K_COUNT] = {"ok", "error", "error-reads", "error-writes", "flaky", "delay",
                                         "removed", "corrupt-reads", "corrupt-writes", "bad-blocks",
                                         "lose-unsynced", "off"};
const char *const OP_NAMES[OP_COUNT] = {"read", "write", "fsync"};

static int ranged_kind(enum kind k)
{
    return k == K_ERROR || k == K_ERROR_READS || k == K_ERROR_WRITES || k == K_FLAKY || k == K_DELAY
        || k == K_CORRUPT_READS || k == K_CORRUPT_WRITES || k == K_BAD_BLOCKS;
}

static int p_kind(enum kind k) { return k == K_FLAKY || k == K_CORRUPT_READS || k == K_CORRUPT_WRITES; }

/* FaultMode.fails: the mode always fails this op */
int mode_fails(const struct mode *m, enum op op)
{
    switch (m->kind) {
    case K_ERROR:
    case K_REMOVED:
        return 1;
    case K_ERROR_READS:
        return op == OP_READ;
    case K_ERROR_WRITES:
        return op == OP_WRITE || op == OP_FSYNC;
    default:
        return 0;
    }
}

/* FaultMode.in_scope */
int in_scope(const struct mode *m, enum op op, uint64_t off, uint64_t size)
{
    if (!m->nranges)
        return 1;
    return op != OP_FSYNC && ranges_overlap(m->ranges, m->nranges, off, off + (size ? size : 1));
}

void sb_mode_text(struct sbuf *b, const struct mode *m)
{
    if (p_kind(m->kind))
        sb_printf(b, "%s:%g:%" PRId64, KIND_NAMES[m->kind], m->p, m->seed);
    else if (m->kind == K_DELAY)
        sb_printf(b, "delay:%g", m->delay_ms);
    else
        sb_puts(b, KIND_NAMES[m->kind]);
    for (size_t i = 0; i < m->nranges; i++)
        sb_printf(b, "%s%" PRIu64 "-%" PRIu64, i ? "," : "@", m->ranges[i].start, m->ranges[i].end);
}

/* float(x) of a mode field: 0 or an error text in err */
static int mode_float(const struct jv *v, const char *field, double dflt, double *out, struct sbuf *err)
{
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (v->t == J_NUM || v->t == J_TRUE || v->t == J_FALSE) {
        *out = v->t == J_NUM ? v->num : v->t == J_TRUE;
        return 0;
    }
    sb_printf(err, "TypeError: fault mode field '%s' must be a number, not ", field);
    sb_repr(err, v);
    return -1;
}

int parse_mode(const struct jv *v, struct mode *m, struct sbuf *err)
{
    const struct jv empty = {.t = J_OBJ};
    memset(m, 0, sizeof *m);
    if (!jtruthy(v))
        v = &empty; /* req.get("mode") or {} */
    if (v->t != J_OBJ) {
        sb_puts(err, "TypeError: fault mode must be a JSON object, not ");
        sb_repr(err, v);
        return -1;
    }
    const struct jv *kind = jget(v, "kind"), *seed = jget(v, "seed");
    if (!kind) {
        sb_puts(err, "ValueError: fault mode ");
        sb_repr(err, v);
        sb_puts(err, " lacks field 'kind'");
        return -1;
    }
    m->kind = K_COUNT;
    for (int k = 0; kind->t == J_STR && !kind->bad && k < K_COUNT; k++)
        if (strcmp(kind->str, KIND_NAMES[k]) == 0)
            m->kind = (enum kind)k;
    if (m->kind == K_COUNT) {
        sb_puts(err, "ValueError: fault mode kind ");
        sb_repr(err, kind);
        sb_puts(err, " is unknown (choose from ok, error, error-reads, error-writes, flaky, delay, removed, "
                     "corrupt-reads, corrupt-writes, bad-blocks, lose-unsynced, off)");
        return -1;
    }
    if (mode_float(jget(v, "p"), "p", 0.0, &m->p, err) || mode_float(jget(v, "delay_ms"), "delay_ms", 0.0, &m->delay_ms, err))
        return -1;
    if (seed) { /* int(x): integers, bools, floats truncated */
        if (seed->t == J_NUM && seed->is_int && seed->int_ok)
            m->seed = seed->ival;
        else if (seed->t == J_TRUE || seed->t == J_FALSE)
            m->seed = seed->t == J_TRUE;
        else if (seed->t == J_NUM && !seed->is_int && isfinite(seed->num) && fabs(seed->num) < 9.2e18)
            m->seed = (int64_t)seed->num;
        else {
            sb_puts(err, "ValueError: fault mode seed ");
            sb_repr(err, seed);
            sb_puts(err, " is not an integer within 64 bits");
            return -1;
        }
    }
    if (m->kind == K_FLAKY && !(m->p >= 0.0 && m->p <= 1.0)) {
        sb_puts(err, "ValueError: flaky probability p=");
        sb_pyfloat(err, m->p, 0);
        sb_puts(err, " must be within [0, 1]");
        return -1;
    }
    if ((m->kind == K_CORRUPT_READS || m->kind == K_CORRUPT_WRITES) && !(m->p > 0.0 && m->p <= 1.0)) {
        sb_printf(err, "ValueError: %s: the share of blocks corrupted p=", KIND_NAMES[m->kind]);
        sb_pyfloat(err, m->p, 0);
        sb_puts(err, " must be within (0, 1]");
        return -1;
    }
    if (m->kind == K_DELAY && !(m->delay_ms >= 0.0 && m->delay_ms <= 600000.0)) {
        sb_puts(err, "ValueError: delay_ms=");
        sb_pyfloat(err, m->delay_ms, 0);
        sb_puts(err, " must be within [0, 600000]");
        return -1;
    }
    if (parse_ranges(jget(v, "ranges"), m->kind == K_BAD_BLOCKS ? BLOCK : 1, &m->ranges, &m->nranges, err))
        return -1;
    if (m->nranges && !ranged_kind(m->kind)) {
        sb_printf(err, "ValueError: mode %s takes no ranges (ranged kinds: error, error-reads, error-writes, "
                       "flaky, delay, corrupt-reads, corrupt-writes, bad-blocks)", KIND_NAMES[m->kind]);
        free(m->ranges);
        return -1;
    }
    if (m->kind == K_BAD_BLOCKS && !m->nranges) {
        sb_puts(err, "ValueError: bad-blocks needs the bad blocks as ranges");
        return -1;
    }
    return 0;
}
