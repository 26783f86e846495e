/*
 * jbodlab-faultfs: one op through an image's mode (the twin of the I/O of infra/fault_image.py).
 *
 * The gate of an op: count it; mode ok, or ranges given and the op outside them (an fsync is
 * always outside) -> pass; the mode always fails the op, flaky and a draw < p, a read of a
 * bad block, a read with the power off -> count injected, EIO; delay -> sleep, pass. Then the
 * effects: corrupt-reads flips the chosen blocks' bits in the data read, corrupt-writes in a
 * copy of the data written (block_flip, prng.c); a write to a bad block remaps it;
 * lose-unsynced keeps writes in the volatile cache (cache.c) until a flush writes them to the
 * backing file; off drops writes.
 */
#define _GNU_SOURCE
#include "image.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "clocklog.h"
#include "prng.h"

/* count one injected effect (lock held) */
static void hit(struct image *im, int op)
{
    if (op >= 0)
        im->injected[op]++;
    if (im->first_hit_ns < 0)
        im->first_hit_ns = now_ns();
}

/* count the op; -EIO, or 0 with the mode the op proceeds under in *out (K_OK when out of scope) */
static int gate(struct image *im, enum op op, uint64_t off, uint64_t size, struct mode *out)
{
    pthread_mutex_lock(&im->lock);
    im->ops[op]++;
    struct mode m = im->mode;
    int fail = 0;
    if (m.kind == K_OK || !in_scope(&m, op, off, size)) {
        pthread_mutex_unlock(&im->lock);
        *out = (struct mode){.kind = K_OK};
        return 0;
    }
    fail = mode_fails(&m, op) || (m.kind == K_FLAKY && rng_next(im->rng) < m.p)
        || (m.kind == K_OFF && op == OP_READ);
    if (m.kind == K_BAD_BLOCKS && op == OP_READ)
        fail = bad_blocks_hit(im->bad, im->nbad, off / BLOCK, (off + (size ? size : 1) - 1) / BLOCK);
    if (fail)
        hit(im, op);
    else if (m.kind == K_DELAY && m.delay_ms > 0)
        hit(im, -1);
    pthread_mutex_unlock(&im->lock);
    if (fail)
        return -EIO;
    if (m.kind == K_DELAY && m.delay_ms > 0) {
        double s = m.delay_ms / 1000.0;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    *out = m;
    return 0;
}

/* flip the chosen bits of buf (n bytes at image offset off); how many */
static uint64_t corrupt(const struct mode *m, char *buf, size_t n, off_t off)
{
    uint64_t flipped = 0;
    if (!n)
        return 0;
    for (uint64_t b = (uint64_t)off / BLOCK; b <= ((uint64_t)off + n - 1) / BLOCK; b++) {
        unsigned pos, bit;
        if (!block_flip(m->seed, b, m->p, &pos, &bit))
            continue;
        uint64_t at = b * BLOCK + pos;
        if (at < (uint64_t)off || at >= (uint64_t)off + n)
            continue;
        if (m->nranges && !ranges_overlap(m->ranges, m->nranges, at, at + 1))
            continue;
        buf[at - (uint64_t)off] ^= (char)(1u << bit);
        flipped++;
    }
    return flipped;
}

static void count_flips(struct image *im, enum op op, uint64_t flipped)
{
    if (!flipped)
        return;
    pthread_mutex_lock(&im->lock);
    hit(im, op);
    im->flipped += flipped;
    pthread_mutex_unlock(&im->lock);
}

int image_read(struct image *im, int fd, char *buf, size_t size, off_t off)
{
    struct mode m;
    int rc;
    if (atomic_load(&im->cached)) {
        pthread_mutex_lock(&im->cache_lock);
        if (atomic_load(&im->cached)) {
            if ((rc = gate(im, OP_READ, (uint64_t)off, size, &m)) == 0) {
                ssize_t n = pread(fd, buf, size, off);
                rc = n < 0 ? -errno : (int)n;
                if (n > 0)
                    cache_overlay(im, buf, (size_t)n, off);
            }
            pthread_mutex_unlock(&im->cache_lock);
            return rc;
        }
        pthread_mutex_unlock(&im->cache_lock);
    }
    if ((rc = gate(im, OP_READ, (uint64_t)off, size, &m)))
        return rc;
    ssize_t n = pread(fd, buf, size, off);
    if (n < 0)
        return -errno;
    if (m.kind == K_CORRUPT_READS)
        count_flips(im, OP_READ, corrupt(&m, buf, (size_t)n, off));
    return (int)n;
}

int image_write(struct image *im, int fd, const char *buf, size_t size, off_t off)
{
    struct mode m;
    int rc;
    if (atomic_load(&im->cached)) {
        pthread_mutex_lock(&im->cache_lock);
        if (atomic_load(&im->cached)) {
            if ((rc = gate(im, OP_WRITE, (uint64_t)off, size, &m)) == 0) {
                rc = m.kind == K_LOSE_UNSYNCED ? cache_write(im, fd, buf, size, off) : (int)size;
                pthread_mutex_lock(&im->lock);
                hit(im, OP_WRITE); /* cached, or dropped (off) */
                if (m.kind == K_OFF)
                    im->dropped_bytes += size; /* a write after the power went: lost too */
                pthread_mutex_unlock(&im->lock);
            }
            pthread_mutex_unlock(&im->cache_lock);
            return rc;
        }
        pthread_mutex_unlock(&im->cache_lock);
    }
    if ((rc = gate(im, OP_WRITE, (uint64_t)off, size, &m)))
        return rc;
    ssize_t n;
    if (m.kind == K_CORRUPT_WRITES) {
        char *copy = malloc(size ? size : 1);
        if (!copy)
            return -ENOMEM;
        memcpy(copy, buf, size);
        uint64_t flipped = corrupt(&m, copy, size, off);
        n = pwrite(fd, copy, size, off);
        free(copy);
        if (n > 0)
            count_flips(im, OP_WRITE, flipped);
    } else {
        n = pwrite(fd, buf, size, off);
    }
    if (n < 0)
        return -errno;
    if (m.kind == K_BAD_BLOCKS && n > 0) { /* a write remaps the bad blocks it covers */
        uint64_t first = (uint64_t)off / BLOCK, last = ((uint64_t)off + (uint64_t)n - 1) / BLOCK;
        pthread_mutex_lock(&im->lock);
        bad_blocks_remap(im->bad, &im->nbad, first, last);
        pthread_mutex_unlock(&im->lock);
    }
    return (int)n;
}

int image_fsync(struct image *im, int fd, int datasync, int host_sync)
{
    struct mode m;
    int rc = gate(im, OP_FSYNC, 0, 0, &m);
    if (rc || m.kind == K_OFF)
        return rc;
    if (m.kind == K_LOSE_UNSYNCED) {
        pthread_mutex_lock(&im->cache_lock);
        rc = cache_write_back(im, fd);
        pthread_mutex_unlock(&im->cache_lock);
        if (rc)
            return rc;
    }
    if (host_sync) {
        if ((datasync ? fdatasync(fd) : fsync(fd)) != 0)
            return -errno;
        pthread_mutex_lock(&im->lock);
        im->host_syncs++;
        pthread_mutex_unlock(&im->lock);
    }
    return 0;
}
