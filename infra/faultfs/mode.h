/*
 * jbodlab-faultfs: a fault mode, the twin of FaultMode of infra/faultmodes.py (see there for
 * what each mode means): its kinds, the ops it acts on, and what it decides (mode.c).
 */
#ifndef JBODLAB_MODE_H
#define JBODLAB_MODE_H

#include <stddef.h>
#include <stdint.h>

#include "jsonio.h"
#include "ranges.h"

enum kind { K_OK, K_ERROR, K_ERROR_READS, K_ERROR_WRITES, K_FLAKY, K_DELAY, K_REMOVED, K_CORRUPT_READS,
            K_CORRUPT_WRITES, K_BAD_BLOCKS, K_LOSE_UNSYNCED, K_OFF, K_COUNT };
enum op { OP_READ, OP_WRITE, OP_FSYNC, OP_COUNT };

extern const char *const KIND_NAMES[K_COUNT];   /* as the protocol spells them */
extern const char *const OP_NAMES[OP_COUNT];

struct mode {
    enum kind kind;
    double p;
    int64_t seed;
    double delay_ms;
    struct range *ranges;         /* sorted, merged; never freed once set (a gate may hold a copy) */
    size_t nranges;
};

/* the "mode" of a set request (FaultMode.from_dict and its validation, Python's messages): 0, or -1 with err */
int parse_mode(const struct jv *v, struct mode *m, struct sbuf *err);
void sb_mode_text(struct sbuf *b, const struct mode *m);
/* FaultMode.fails: the mode always fails this op */
int mode_fails(const struct mode *m, enum op op);
/* FaultMode.in_scope: the op (size bytes at off) meets the mode's ranges, or it has none */
int in_scope(const struct mode *m, enum op op, uint64_t off, uint64_t size);

#endif
