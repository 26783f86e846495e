/*
 * jbodlab-faultfs: one served image — the twin of infra/fault_image.py (see image.h).
 *
 * The gate of an op: count it; mode ok, or ranges given and the op outside them (an fsync is
 * always outside) -> pass; the mode always fails the op, flaky and a draw < p, a read of a
 * bad block, a read with the power off -> count injected, EIO; delay -> sleep, pass. Then the
 * effects: corrupt-reads flips the chosen blocks' bits in the data read, corrupt-writes in a
 * copy of the data written (block_flip: a hash of seed and block number, the same function
 * as infra.faultmodes.block_flip, so both daemons corrupt the same bits); a write to a bad
 * block remaps it; lose-unsynced keeps writes in 4 KiB pages of a volatile cache until a
 * flush writes them to the backing file; off drops writes. Leaving lose-unsynced any way but
 * a power cut writes the cache back.
 */
#define _GNU_SOURCE
#include "image.h"

#include "clocklog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define MAX_RANGES 4096
#define MAX_CACHE_BYTES (256ULL << 20)   /* a fuller volatile cache is written back as a whole */

static const char *const KIND_NAMES[K_COUNT] = {"ok", "error", "error-reads", "error-writes", "flaky", "delay",
                                                "removed", "corrupt-reads", "corrupt-writes", "bad-blocks",
                                                "lose-unsynced", "off"};
static const char *const OP_NAMES[OP_COUNT] = {"read", "write", "fsync"};
static const char *backing;

/* ---- modes ------------------------------------------------------------------------------- */

static int ranged_kind(enum kind k)
{
    return k == K_ERROR || k == K_ERROR_READS || k == K_ERROR_WRITES || k == K_FLAKY || k == K_DELAY
        || k == K_CORRUPT_READS || k == K_CORRUPT_WRITES || k == K_BAD_BLOCKS;
}

static int p_kind(enum kind k) { return k == K_FLAKY || k == K_CORRUPT_READS || k == K_CORRUPT_WRITES; }

/* FaultMode.fails: the mode always fails this op */
static int mode_fails(const struct mode *m, enum op op)
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

/* overlaps(): [start, end) meets one of the sorted, merged ranges */
static int overlaps(const struct range *r, size_t n, uint64_t start, uint64_t end)
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

/* FaultMode.in_scope */
static int in_scope(const struct mode *m, enum op op, uint64_t off, uint64_t size)
{
    if (!m->nranges)
        return 1;
    return op != OP_FSYNC && overlaps(m->ranges, m->nranges, off, off + (size ? size : 1));
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

/* ---- the flaky PRNG (xoshiro256**, seeded through splitmix64) and the corruption hash -------- */

static uint64_t mix64(uint64_t z) /* splitmix64's finaliser = infra.faultmodes.mix64 */
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t *s, int64_t seed)
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

static double rng_next(uint64_t *s) /* uniform in [0, 1) */
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
static int block_flip(int64_t seed, uint64_t block, double p, unsigned *pos, unsigned *bit)
{
    uint64_t u = mix64((uint64_t)seed ^ mix64(block));
    if ((double)(u >> 11) * 0x1.0p-53 >= p)
        return 0;
    uint64_t v = mix64(u);
    *pos = (unsigned)(v % BLOCK);
    *bit = (unsigned)((v >> 12) & 7);
    return 1;
}

/* ---- images -------------------------------------------------------------------------------- */

static _Atomic(struct image *) images;
static pthread_mutex_t images_lock = PTHREAD_MUTEX_INITIALIZER;

void images_init(const char *backing_dir) { backing = backing_dir; }

struct image *images_head(void) { return atomic_load_explicit(&images, memory_order_acquire); }

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

/* count one injected effect (lock held) */
static void hit(struct image *im, int op)
{
    if (op >= 0)
        im->injected[op]++;
    if (im->first_hit_ns < 0)
        im->first_hit_ns = now_ns();
}

/* ---- the volatile cache (cache_lock held) ----------------------------------------------------- */

static struct cpage *cache_slot(struct image *im, uint64_t page, int create)
{
    if (create && (im->npages + 1) * 2 > im->cap) {
        size_t cap = im->cap ? im->cap * 2 : 1024;
        struct cpage *s = calloc(cap, sizeof *s);
        if (!s)
            return NULL;
        for (size_t i = 0; i < im->cap; i++) {
            if (!im->slots[i].key)
                continue;
            size_t j = (size_t)mix64(im->slots[i].key) & (cap - 1);
            while (s[j].key)
                j = (j + 1) & (cap - 1);
            s[j] = im->slots[i];
        }
        free(im->slots);
        im->slots = s;
        im->cap = cap;
    }
    if (!im->cap)
        return NULL;
    uint64_t key = page + 1;
    size_t j = (size_t)mix64(key) & (im->cap - 1);
    while (im->slots[j].key && im->slots[j].key != key)
        j = (j + 1) & (im->cap - 1);
    if (im->slots[j].key == key)
        return &im->slots[j];
    if (!create)
        return NULL;
    im->slots[j].key = key;
    im->slots[j].data = NULL;
    im->npages++;
    return &im->slots[j];
}

static void cache_drop(struct image *im)
{
    for (size_t i = 0; i < im->cap; i++)
        free(im->slots[i].data);
    free(im->slots);
    im->slots = NULL;
    im->cap = im->npages = 0;
}

/* the cache to the backing file (fd < 0: open it); 0 or -errno, the cache empty either way */
static int cache_write_back(struct image *im, int fd)
{
    int own = fd < 0, rc = 0;
    if (!im->npages) {
        cache_drop(im);
        return 0;
    }
    if (own) {
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", backing, im->name);
        if ((fd = open(full, O_RDWR | O_CLOEXEC)) < 0)
            rc = -errno;
    }
    for (size_t i = 0; fd >= 0 && i < im->cap; i++)
        if (im->slots[i].key && pwrite(fd, im->slots[i].data, BLOCK, (off_t)((im->slots[i].key - 1) * BLOCK)) != BLOCK)
            rc = rc ? rc : -EIO;
    if (own && fd >= 0)
        close(fd);
    cache_drop(im);
    return rc;
}

static int cache_write(struct image *im, int fd, const char *buf, size_t size, off_t off)
{
    uint64_t pos = (uint64_t)off, end = pos + size;
    while (pos < end) {
        uint64_t page = pos / BLOCK, rel = pos % BLOCK, n = BLOCK - rel < end - pos ? BLOCK - rel : end - pos;
        struct cpage *slot = cache_slot(im, page, 1);
        if (!slot)
            return -ENOMEM;
        if (!slot->data) {
            if (!(slot->data = calloc(1, BLOCK))) {
                slot->key = 0; /* nothing else refers to it yet */
                im->npages--;
                return -ENOMEM;
            }
            ssize_t r = pread(fd, slot->data, BLOCK, (off_t)(page * BLOCK));
            (void)r; /* short or failed: the rest stays zero, as past the end of the file */
        }
        memcpy(slot->data + rel, buf + (pos - (uint64_t)off), n);
        pos += n;
    }
    if ((uint64_t)im->npages * BLOCK > MAX_CACHE_BYTES)
        return cache_write_back(im, fd) ? -EIO : (int)size;
    return (int)size;
}

static void cache_overlay(struct image *im, char *buf, size_t n, off_t off)
{
    if (!n || !im->npages)
        return;
    for (uint64_t page = (uint64_t)off / BLOCK; page <= ((uint64_t)off + n - 1) / BLOCK; page++) {
        struct cpage *slot = cache_slot(im, page, 0);
        if (!slot || !slot->data)
            continue;
        uint64_t start = page * BLOCK > (uint64_t)off ? page * BLOCK : (uint64_t)off;
        uint64_t stop = (page + 1) * BLOCK < (uint64_t)off + n ? (page + 1) * BLOCK : (uint64_t)off + n;
        memcpy(buf + (start - (uint64_t)off), slot->data + (start - page * BLOCK), stop - start);
    }
}

/* ---- switching -------------------------------------------------------------------------------- */

void image_set(struct image *im, const struct mode *m)
{
    uint64_t *bad = NULL;
    size_t nbad = 0;
    if (m->kind == K_BAD_BLOCKS) {
        for (size_t i = 0; i < m->nranges; i++)
            nbad += (m->ranges[i].end - m->ranges[i].start) / BLOCK;
        if ((bad = malloc((nbad ? nbad : 1) * sizeof *bad))) {
            size_t k = 0;
            for (size_t i = 0; i < m->nranges; i++)
                for (uint64_t b = m->ranges[i].start / BLOCK; b < m->ranges[i].end / BLOCK; b++)
                    bad[k++] = b;
        } else {
            nbad = 0;
        }
    }
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

/* ---- the gate and the I/O ----------------------------------------------------------------------- */

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
    if (m.kind == K_BAD_BLOCKS && op == OP_READ) {
        uint64_t first = off / BLOCK, last = (off + (size ? size : 1) - 1) / BLOCK;
        size_t lo = 0, hi = im->nbad; /* the first bad block >= first */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (im->bad[mid] < first)
                lo = mid + 1;
            else
                hi = mid;
        }
        fail = lo < im->nbad && im->bad[lo] <= last;
    }
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
        if (m->nranges && !overlaps(m->ranges, m->nranges, at, at + 1))
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
        size_t k = 0;
        for (size_t i = 0; i < im->nbad; i++)
            if (im->bad[i] < first || im->bad[i] > last)
                im->bad[k++] = im->bad[i];
        im->nbad = k;
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

/* ---- the control protocol's parts ------------------------------------------------------------------ */

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

static int cmp_ranges(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* normalize_ranges: [[start, end], ...] of integers, sorted and merged, widened to BLOCK for bad-blocks */
static int parse_ranges(const struct jv *v, struct mode *m, struct sbuf *err)
{
    m->ranges = NULL;
    m->nranges = 0;
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
    uint64_t widen = m->kind == K_BAD_BLOCKS ? BLOCK : 1;
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
    m->ranges = r;
    m->nranges = out;
    return 0;
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
    if (parse_ranges(jget(v, "ranges"), m, err))
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
