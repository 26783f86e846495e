/*
 * jbodlab-faultfs: the FUSE operations (those of the Python FaultFS, nothing more): the
 * regular files of the backing directory served flat; read, write and fsync of an image go
 * through its mode (imageio.c), the rest straight to the backing file.
 */
#define _GNU_SOURCE
#include "faultfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "image.h"

int backing_path(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", backing_dir, name);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

/* FaultFS._name: the path's one component, or NULL (ENOENT). */
static const char *path_name(const char *path)
{
    if (!path)
        return NULL;
    while (*path == '/')
        path++;
    return (*path && !strchr(path, '/')) ? path : NULL;
}

static int image_of(const char *path, struct image **out)
{
    const char *name = path_name(path);
    if (!name)
        return -ENOENT;
    *out = image_get(name);
    return *out ? 0 : -ENOMEM;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    (void)fi;
    memset(st, 0, sizeof *st);
    if (strcmp(path, "/") == 0) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
        return 0;
    }
    const char *name = path_name(path);
    char full[PATH_MAX];
    struct stat b;
    if (!name)
        return -ENOENT;
    if (backing_path(full, sizeof full, name))
        return -ENAMETOOLONG;
    if (lstat(full, &b) != 0)
        return -errno;
    if (!S_ISREG(b.st_mode))
        return -ENOENT;
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    st->st_size = b.st_size;
    st->st_uid = b.st_uid;
    st->st_gid = b.st_gid;
    st->st_atim = b.st_atim;
    st->st_mtim = b.st_mtim;
    st->st_ctim = b.st_ctim;
    st->st_blocks = b.st_blocks;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)off, (void)fi, (void)flags;
    if (strcmp(path, "/") != 0)
        return -ENOTDIR;
    DIR *d = opendir(backing_dir);
    if (!d)
        return -errno;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        char full[PATH_MAX];
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || backing_path(full, sizeof full, e->d_name)
            || stat(full, &st) != 0 || !S_ISREG(st.st_mode))
            continue; /* Path.is_file(): follows symlinks, False on any error */
        if (n == cap) {
            char **n2 = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
            if (!n2) {
                rc = -ENOMEM;
                break;
            }
            names = n2;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0) {
        qsort(names, n, sizeof *names, cmp_names);
        filler(buf, ".", NULL, 0, 0);
        filler(buf, "..", NULL, 0, 0);
        for (size_t i = 0; i < n; i++)
            filler(buf, names[i], NULL, 0, 0);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
    struct image *im;
    char full[PATH_MAX];
    int rc = image_of(path, &im);
    if (rc)
        return rc;
    if (backing_path(full, sizeof full, im->name))
        return -ENAMETOOLONG;
    int fd = open(full, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct image *im;
    int rc = image_of(path, &im);
    return rc ? rc : image_read(im, (int)fi->fh, buf, size, off);
}

static int fs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct image *im;
    int rc = image_of(path, &im);
    return rc ? rc : image_write(im, (int)fi->fh, buf, size, off);
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    struct image *im;
    int rc = image_of(path, &im);
    return rc ? rc : image_fsync(im, (int)fi->fh, datasync, host_sync);
}

static int fs_flush(const char *path, struct fuse_file_info *fi)
{
    (void)path, (void)fi;
    return 0;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    return close((int)fi->fh) != 0 ? -errno : 0;
}

static int fs_truncate(const char *path, off_t length, struct fuse_file_info *fi)
{
    (void)fi;
    const char *name = path_name(path);
    char full[PATH_MAX];
    if (!name)
        return -ENOENT;
    if (backing_path(full, sizeof full, name))
        return -ENAMETOOLONG;
    return truncate(full, length) != 0 ? -errno : 0;
}

static int fs_statfs(const char *path, struct statvfs *out)
{
    (void)path;
    struct statvfs sv;
    if (statvfs(backing_dir, &sv) != 0)
        return -errno;
    memset(out, 0, sizeof *out);
    out->f_bsize = sv.f_bsize;
    out->f_frsize = sv.f_frsize;
    out->f_blocks = sv.f_blocks;
    out->f_bfree = sv.f_bfree;
    out->f_bavail = sv.f_bavail;
    out->f_files = sv.f_files;
    out->f_ffree = sv.f_ffree;
    out->f_favail = sv.f_favail;
    out->f_namemax = sv.f_namemax;
    return 0;
}

const struct fuse_operations fs_ops = {
    .getattr = fs_getattr,
    .readdir = fs_readdir,
    .open = fs_open,
    .read = fs_read,
    .write = fs_write,
    .fsync = fs_fsync,
    .flush = fs_flush,
    .release = fs_release,
    .truncate = fs_truncate,
    .statfs = fs_statfs,
};
