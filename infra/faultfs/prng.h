/* jbodlab-faultfs: the flaky PRNG and the corruption hash (prng.c). */
#ifndef JBODLAB_PRNG_H
#define JBODLAB_PRNG_H

#include <stdint.h>

uint64_t mix64(uint64_t z);                 /* splitmix64's finaliser = infra.faultmodes.mix64 */
void rng_seed(uint64_t *s, int64_t seed);   /* the xoshiro256** state s[4] from a mode's seed */
double rng_next(uint64_t *s);               /* uniform in [0, 1) */
/* infra.faultmodes.block_flip: is this block corrupted, and where (byte in the block, bit)? */
int block_flip(int64_t seed, uint64_t block, double p, unsigned *pos, unsigned *bit);

#endif
