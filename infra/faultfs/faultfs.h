/*
 * jbodlab-faultfs: what the daemon's main (faultfs.c), its FUSE operations (fuseops.c) and its
 * control socket (control.c) share.
 */
#ifndef JBODLAB_FAULTFS_H
#define JBODLAB_FAULTFS_H

#define FUSE_USE_VERSION 312
#include <fuse.h>

#include <stddef.h>

extern const char *backing_dir;   /* --backing */
extern int host_sync;             /* --host-sync */

/* "<backing>/<name>" into buf; -ENAMETOOLONG if it does not fit */
int backing_path(char *buf, size_t size, const char *name);

extern const struct fuse_operations fs_ops;
/* the control socket's accept loop (arg: the listening fd), one detached thread per connection */
void *ctl_accept(void *arg);

#endif
