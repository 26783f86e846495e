/*
 * jbodlab-faultfs: the served images — the list of them (it only grows), switching an image's
 * mode (a set, a power cut, a rearm) and its snapshot for the control protocol. Leaving
 * lose-unsynced any way but a power cut writes the volatile cache back. The I/O through a mode
 * is imageio.c.
 */
#define _GNU_SOURCE
#include "image.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "clocklog.h"
#include "prng.h"

static const char *backing;

static _Atomic(struct image *) images;

static pthread_mutex_t images_lock = PTHREAD_MUTEX_INITIALIZER;

void images_init(const char *backing_dir) { backing = backing_dir; }

struct image *images_head(void) { return atomic_load_explicit(&images, memory_order_acquire); }

const char *images_backing(void) { return backing; }

static struct image *image_find(const char *name)
{
    for (struct image *im = images_head(); im; im = im->next)
        if (strcmp(im->name, name) == 0)
            return im;
    return NULL;
}

struct image *image_get(const char *name)
{
    struct image *im = image_find(name);
    if (im)
        return im;
    pthread_mutex_lock(&images_lock);
    im = image_find(name);
    if (!im && (im = calloc(1, sizeof *im + strlen(name) + 1))) {
        pthread_mutex_init(&im->lock, NULL);
        pthread_mutex_init(&im->cache_lock, NULL);
        rng_seed(im->rng, 0);
        im->since_ns = now_ns();
        im->first_hit_ns = -1;
        strcpy(im->name, name);
        im->next = atomic_load_explicit(&images, memory_order_relaxed);
        atomic_store_explicit(&images, im, memory_order_release);
    }
    pthread_mutex_unlock(&images_lock);
    return im;
}

void image_set(struct image *im, const struct mode *m)
{
    uint64_t *bad = NULL;
    size_t nbad = 0;
    if (m->kind == K_BAD_BLOCKS)
        bad = bad_blocks_of(m->ranges, m->nranges, &nbad);
    pthread_mutex_lock(&im->cache_lock);
    if (im->mode.kind == K_LOSE_UNSYNCED)
        cache_write_back(im, -1); /* leaving the mode without a power cut loses nothing */
    pthread_mutex_lock(&im->lock);
    im->mode = *m;
    rng_seed(im->rng, m->seed);
    im->since_ns = now_ns();
    im->first_hit_ns = -1;
    memset(im->injected, 0, sizeof im->injected);
    im->flipped = im->dropped_bytes = 0;
    free(im->bad);
    im->bad = bad;
    im->nbad = nbad;
    atomic_store(&im->cached, m->kind == K_LOSE_UNSYNCED || m->kind == K_OFF);
    pthread_mutex_unlock(&im->lock);
    pthread_mutex_unlock(&im->cache_lock);
}

uint64_t image_power_cut(struct image *im)
{
    pthread_mutex_lock(&im->cache_lock);
    uint64_t dropped = (uint64_t)im->npages * BLOCK;
    cache_drop(im);
    pthread_mutex_lock(&im->lock);
    im->mode = (struct mode){.kind = K_OFF};
    im->since_ns = now_ns();
    im->first_hit_ns = -1;
    memset(im->injected, 0, sizeof im->injected);
    im->flipped = 0;
    im->dropped_bytes = dropped;
    free(im->bad);
    im->bad = NULL;
    im->nbad = 0;
    atomic_store(&im->cached, 1);
    pthread_mutex_unlock(&im->lock);
    pthread_mutex_unlock(&im->cache_lock);
    return dropped;
}

void image_rearm(struct image *im)
{
    pthread_mutex_lock(&im->lock);
    im->first_hit_ns = -1;
    pthread_mutex_unlock(&im->lock);
}

void sb_snapshot(struct sbuf *b, struct image *im)
{
    pthread_mutex_lock(&im->lock);
    struct mode m = im->mode;
    int64_t since = im->since_ns, first = im->first_hit_ns;
    uint64_t ops[OP_COUNT], inj[OP_COUNT], syncs = im->host_syncs, flipped = im->flipped;
    uint64_t dropped = im->dropped_bytes, nbad = im->nbad;
    memcpy(ops, im->ops, sizeof ops);
    memcpy(inj, im->injected, sizeof inj);
    pthread_mutex_unlock(&im->lock);
    uint64_t unsynced = (uint64_t)im->npages * BLOCK; /* a reading without the cache lock: a figure */
    sb_printf(b, "\"mode\": {\"kind\": \"%s\", \"p\": ", KIND_NAMES[m.kind]);
    sb_pyfloat(b, m.p, 1);
    sb_printf(b, ", \"seed\": %" PRId64 ", \"delay_ms\": ", m.seed);
    sb_pyfloat(b, m.delay_ms, 1);
    sb_puts(b, ", \"ranges\": [");
    for (size_t i = 0; i < m.nranges; i++)
        sb_printf(b, "%s[%" PRIu64 ", %" PRIu64 "]", i ? ", " : "", m.ranges[i].start, m.ranges[i].end);
    sb_printf(b, "]}, \"since_ns\": %" PRId64, since);
    const uint64_t *counts[2] = {ops, inj};
    for (int k = 0; k < 2; k++) {
        sb_puts(b, k ? ", \"injected\": {" : ", \"ops\": {");
        for (int i = 0; i < OP_COUNT; i++)
            sb_printf(b, "%s\"%s\": %" PRIu64, i ? ", " : "", OP_NAMES[i], counts[k][i]);
        sb_puts(b, "}");
    }
    sb_printf(b, ", \"host_syncs\": %" PRIu64, syncs);
    if (first < 0)
        sb_puts(b, ", \"first_hit_ns\": null");
    else
        sb_printf(b, ", \"first_hit_ns\": %" PRId64, first);
    sb_printf(b, ", \"flipped\": %" PRIu64 ", \"unsynced_bytes\": %" PRIu64 ", \"dropped_bytes\": %" PRIu64
                 ", \"bad_blocks\": %" PRIu64, flipped, unsynced, dropped, nbad);
}
