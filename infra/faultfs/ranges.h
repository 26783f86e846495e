/*
 * jbodlab-faultfs: the range tables of a mode — byte ranges of an image and the bad-block
 * table of bad-blocks (ranges.c).
 */
#ifndef JBODLAB_RANGES_H
#define JBODLAB_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "jsonio.h"

#define BLOCK 4096                /* bytes: the unit of bad blocks, of corruption and of the volatile cache */

struct range {
    uint64_t start, end;          /* bytes of the image, half open */
};

/* overlaps(): [start, end) meets one of the n sorted, merged ranges */
int ranges_overlap(const struct range *r, size_t n, uint64_t start, uint64_t end);
/* normalize_ranges: the "ranges" of a mode, [[start, end], ...] of integers (absent or null:
 * none), widened to multiples of widen, sorted and merged into *ranges (NULL when none);
 * 0, or -1 with Python's message in err */
int parse_ranges(const struct jv *v, uint64_t widen, struct range **ranges, size_t *nranges, struct sbuf *err);

/* the sorted block numbers the n ranges (multiples of BLOCK) cover; NULL with *nbad 0 out of memory */
uint64_t *bad_blocks_of(const struct range *r, size_t n, size_t *nbad);
/* one of the sorted bad blocks lies within blocks [first, last] */
int bad_blocks_hit(const uint64_t *bad, size_t nbad, uint64_t first, uint64_t last);
/* drop blocks [first, last] from the table (a write remaps them) */
void bad_blocks_remap(uint64_t *bad, size_t *nbad, uint64_t first, uint64_t last);

#endif
