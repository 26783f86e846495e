/* jbodlab-faultfs: an image's volatile cache (cache.c); every call holds the image's cache_lock. */
#ifndef JBODLAB_CACHE_H
#define JBODLAB_CACHE_H

#include <stddef.h>
#include <sys/types.h>

#include "image.h"

void cache_drop(struct image *im);                      /* forget every page (a power cut) */
/* the cache to the backing file (fd < 0: open it); 0 or -errno, the cache empty either way */
int cache_write_back(struct image *im, int fd);
/* a write into the cache's pages (a page's first write reads it from fd; a cache grown past its
 * bound is written back whole); bytes done or -errno */
int cache_write(struct image *im, int fd, const char *buf, size_t size, off_t off);
/* the cached pages laid over n bytes read at off */
void cache_overlay(struct image *im, char *buf, size_t n, off_t off);

#endif
