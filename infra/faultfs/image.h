/*
 * jbodlab-faultfs: one served image — its fault mode, counters, bad blocks and volatile
 * cache (image.c: the images, switching a mode, the snapshot), and the I/O that passes
 * through them (imageio.c). The twin of infra/fault_image.py: the same modes, effects and
 * counters; see infra/faultmodes.py for what each mode means.
 */
#ifndef JBODLAB_IMAGE_H
#define JBODLAB_IMAGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "jsonio.h"
#include "mode.h"

struct cpage {
    uint64_t key;                 /* page number + 1; 0 = empty slot */
    char *data;                   /* 4 KiB */
};

struct image {
    struct image *next;
    pthread_mutex_t lock;         /* mode, counters, draws, bad blocks: never held across I/O or a delay */
    pthread_mutex_t cache_lock;   /* the volatile cache: held by each op of lose-unsynced / off, and by a switch */
    atomic_int cached;            /* the mode is lose-unsynced or off (read without a lock: a hint) */
    struct mode mode;
    uint64_t rng[4];
    int64_t since_ns, first_hit_ns;          /* first_hit_ns -1: none since the mode was set / rearmed */
    uint64_t ops[OP_COUNT], injected[OP_COUNT], host_syncs, flipped, dropped_bytes;
    uint64_t *bad;                /* sorted bad block numbers (bad-blocks) */
    size_t nbad;
    struct cpage *slots;          /* the volatile cache: open addressing, power-of-two capacity */
    size_t cap, npages;
    char name[];
};

void images_init(const char *backing_dir);
struct image *image_get(const char *name);          /* created on first use; NULL only out of memory */
struct image *images_head(void);                    /* the list of images (it only grows, at its head) */
const char *images_backing(void);                   /* the backing directory, as images_init got it */

void image_set(struct image *im, const struct mode *m);  /* takes m->ranges */
uint64_t image_power_cut(struct image *im);              /* drop the cache, mode off; bytes dropped */
void image_rearm(struct image *im);                      /* forget the first hit */
void sb_snapshot(struct sbuf *b, struct image *im);      /* ImageState.snapshot as JSON members */

/* one request through the image's mode: bytes done, or -errno */
int image_read(struct image *im, int fd, char *buf, size_t size, off_t off);
int image_write(struct image *im, int fd, const char *buf, size_t size, off_t off);
int image_fsync(struct image *im, int fd, int datasync, int host_sync);

#endif
