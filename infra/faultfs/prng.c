/*
 * jbodlab-faultfs: the flaky PRNG (xoshiro256**, seeded through splitmix64) and the corruption
 * hash (block_flip, the same function as infra.faultmodes.block_flip, so both daemons corrupt
 * the same bits).
 */
#include "prng.h"

#include "ranges.h"

uint64_t mix64(uint64_t z) /* splitmix64's finaliser = infra.faultmodes.mix64 */
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(uint64_t *s, int64_t seed)
{
    uint64_t x = (uint64_t)seed;
    for (int i = 0; i < 4; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        s[i] = z ^ (z >> 31);
    }
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double rng_next(uint64_t *s) /* uniform in [0, 1) */
{
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

/* infra.faultmodes.block_flip: is this block corrupted, and where (byte in the block, bit)? */
int block_flip(int64_t seed, uint64_t block, double p, unsigned *pos, unsigned *bit)
{
    uint64_t u = mix64((uint64_t)seed ^ mix64(block));
    if ((double)(u >> 11) * 0x1.0p-53 >= p)
        return 0;
    uint64_t v = mix64(u);
    *pos = (unsigned)(v % BLOCK);
    *bit = (unsigned)((v >> 12) & 7);
    return 1;
}
