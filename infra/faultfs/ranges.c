/*
 * jbodlab-faultfs: the range tables of a mode — its byte ranges (normalize_ranges of
 * infra/faultmodes.py: parsed, sorted, merged; the lookup of an op against them) and the
 * bad-block table built from the ranges of bad-blocks (looked up by a read, shrunk by a write).
 */
#define _GNU_SOURCE
#include "ranges.h"

#include <stdlib.h>

#define MAX_RANGES 4096

/* overlaps(): [start, end) meets one of the sorted, merged ranges */
int ranges_overlap(const struct range *r, size_t n, uint64_t start, uint64_t end)
{
    size_t lo = 0, hi = n; /* the first range whose start > start */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].start <= start)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && r[lo - 1].end > start)
        return 1;
    return lo < n && r[lo].start < end;
}

static int cmp_ranges(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : (x->end > y->end) - (x->end < y->end);
}

int parse_ranges(const struct jv *v, uint64_t widen, struct range **ranges, size_t *nranges, struct sbuf *err)
{
    *ranges = NULL;
    *nranges = 0;
    if (!v || v->t == J_NULL)
        return 0;
    if (v->t != J_ARR) {
        sb_puts(err, "ValueError: ranges must be a list of [start, end] pairs, not ");
        sb_repr(err, v);
        return -1;
    }
    size_t n = 0;
    for (const struct jv *e = v->first; e; e = e->next)
        n++;
    if (n > MAX_RANGES * 4) {
        sb_printf(err, "ValueError: %zu ranges: at most %d", n, MAX_RANGES);
        return -1;
    }
    struct range *r = malloc((n ? n : 1) * sizeof *r);
    if (!r) {
        sb_puts(err, "MemoryError: out of memory");
        return -1;
    }
    size_t k = 0;
    for (const struct jv *e = v->first; e; e = e->next) {
        const struct jv *a = e->t == J_ARR ? e->first : NULL, *b = a ? a->next : NULL;
        if (!a || !b || b->next || a->t != J_NUM || b->t != J_NUM || !a->is_int || !b->is_int || !a->int_ok
            || !b->int_ok) {
            sb_puts(err, "ValueError: range ");
            sb_repr(err, e);
            sb_puts(err, " is not a [start, end] pair of integers");
            free(r);
            return -1;
        }
        if (a->ival < 0 || b->ival <= a->ival) {
            sb_printf(err, "ValueError: range [%lld, %lld) must have 0 <= start < end", a->ival, b->ival);
            free(r);
            return -1;
        }
        uint64_t s = (uint64_t)a->ival, t = (uint64_t)b->ival;
        r[k++] = (struct range){s - s % widen, (t + widen - 1) / widen * widen};
    }
    qsort(r, k, sizeof *r, cmp_ranges);
    size_t out = 0;
    for (size_t i = 0; i < k; i++) {
        if (out && r[i].start <= r[out - 1].end) {
            if (r[i].end > r[out - 1].end)
                r[out - 1].end = r[i].end;
        } else {
            r[out++] = r[i];
        }
    }
    if (out > MAX_RANGES) {
        sb_printf(err, "ValueError: %zu ranges: at most %d", out, MAX_RANGES);
        free(r);
        return -1;
    }
    if (!out) {
        free(r);
        r = NULL;
    }
    *ranges = r;
    *nranges = out;
    return 0;
}

uint64_t *bad_blocks_of(const struct range *r, size_t n, size_t *nbad)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += (r[i].end - r[i].start) / BLOCK;
    uint64_t *bad = malloc((count ? count : 1) * sizeof *bad);
    if (!bad) {
        *nbad = 0;
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint64_t blk = r[i].start / BLOCK; blk < r[i].end / BLOCK; blk++)
            bad[k++] = blk;
    *nbad = count;
    return bad;
}

int bad_blocks_hit(const uint64_t *bad, size_t nbad, uint64_t first, uint64_t last)
{
    size_t lo = 0, hi = nbad; /* the first bad block >= first */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bad[mid] < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nbad && bad[lo] <= last;
}

void bad_blocks_remap(uint64_t *bad, size_t *nbad, uint64_t first, uint64_t last)
{
    size_t k = 0;
    for (size_t i = 0; i < *nbad; i++)
        if (bad[i] < first || bad[i] > last)
            bad[k++] = bad[i];
    *nbad = k;
}
