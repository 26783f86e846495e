/*
 * jbodlab-faultfs: the volatile cache of lose-unsynced — writes kept in 4 KiB pages (open
 * addressing, power-of-two capacity) until a flush writes them to the backing file, laid over
 * what a read returns meanwhile, dropped by a power cut. Every function here runs with the
 * image's cache_lock held.
 */
#define _GNU_SOURCE
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prng.h"

#define MAX_CACHE_BYTES (256ULL << 20)   /* a fuller volatile cache is written back as a whole */

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

void cache_drop(struct image *im)
{
    for (size_t i = 0; i < im->cap; i++)
        free(im->slots[i].data);
    free(im->slots);
    im->slots = NULL;
    im->cap = im->npages = 0;
}

/* the cache to the backing file (fd < 0: open it); 0 or -errno, the cache empty either way */
int cache_write_back(struct image *im, int fd)
{
    int own = fd < 0, rc = 0;
    if (!im->npages) {
        cache_drop(im);
        return 0;
    }
    if (own) {
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", images_backing(), im->name);
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

int cache_write(struct image *im, int fd, const char *buf, size_t size, off_t off)
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

void cache_overlay(struct image *im, char *buf, size_t n, off_t off)
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
