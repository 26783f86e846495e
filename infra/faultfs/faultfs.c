/*
 * jbodlab-faultfs: the lab's FUSE fault filesystem, native (libfuse3, high-level path API).
 *
 * The C twin of infra/fusefs.py, with identical behaviour, used by default
 * (infra/fuse_daemon.py picks it; infra/faultfs_build.py builds it into /var/cache/jbodlab/).
 * Why native: under the lab's heavy scenarios the daemon serves 4,000-10,000 requests/s in
 * bursts, and the Python daemon's per-request overhead and GIL convoys cost ~20% of a core
 * and latency on every guest I/O. Here a request is a libfuse worker thread doing a syscall.
 *
 * It serves the regular files of --backing DIR flat at --mount DIR (allow_other,
 * auto_unmount, fsname jbodlab-faultfs, foreground, fuse_loop_mt with --max-threads workers,
 * default 64). read, write and fsync of an image pass through its mode (image.c: the gate,
 * then the effects — EIO, delay, flipped bits, bad blocks, the volatile cache of
 * lose-unsynced; the semantics of infra/fault_image.py). The flaky PRNG (xoshiro256**) is
 * reseeded with the mode's seed whenever a mode is set, so a seeded sequence replays (it is
 * not Python's random sequence); corruption is a hash of seed and block, the same in both
 * daemons. --host-sync: a guest flush that passed the gate is also fdatasync'd/fsync'd on the
 * host and counted in host_syncs. Requests run in parallel: an image's mutex is held for its
 * counters and draws, never across I/O or a delay; only lose-unsynced / off serialise an
 * image's requests (its cache lock).
 *
 * Control: the Python daemon's protocol on --socket (Unix stream, JSON lines, one reply line
 * per request line, a thread per connection): {"op": "ping"} -> {"ok": true, "pid": N};
 * {"op": "list"} -> {"ok": true, "images": {NAME: SNAPSHOT, ...}}; {"op": "set", "image":
 * NAME, "mode": {"kind": K, "p": P, "seed": S, "delay_ms": D, "ranges": [[A, B], ...]}},
 * {"op": "get" | "rearm" | "power-cut", "image": NAME} -> {"ok": true, SNAPSHOT...}, SNAPSHOT =
 * "mode", "since_ns", "ops", "injected", "host_syncs", "first_hit_ns", "flipped",
 * "unsynced_bytes", "dropped_bytes", "bad_blocks", serialized as Python's json.dumps does. A
 * bad request gets {"ok": false, "error": "..."}; nothing a client sends can stop the daemon.
 *
 * Files: faultfs.c (FUSE operations, control, main), image.c (modes and their effects),
 * jsonio.c (JSON as Python writes it).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clocklog.h"
#include "image.h"
#include "jsonio.h"

#define MAX_LINE 65536      /* longest control request line */

static const char *backing_dir;
static int host_sync;

/* ---- small helpers -------------------------------------------------------------------- */

static int backing_path(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", backing_dir, name);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}


/* ---- FUSE operations (those of the Python FaultFS, nothing more) --------------------- */

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

static const struct fuse_operations fs_ops = {
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


/* ---- control requests ------------------------------------------------------------------ */

static void reply_error(struct sbuf *out, const char *msg)
{
    sb_puts(out, "{\"ok\": false, \"error\": ");
    sb_json_str(out, msg, strlen(msg));
    sb_puts(out, "}");
}

/* float(x) of a mode field: 0 or an error text in err. */
static int cmp_images(const void *a, const void *b)
{
    return strcmp((*(struct image *const *)a)->name, (*(struct image *const *)b)->name);
}

/* ControlServer.dispatch: one request line -> one reply (no newline) in out. */
static void dispatch(const char *line, size_t len, struct sbuf *out)
{
    struct sbuf err = {0};
    struct jv *req = jparse(line, len, &err);
    if (!req)
        goto error;
    if (req->t != J_OBJ) {
        sb_puts(&err, "TypeError: a request is a JSON object, not ");
        sb_repr(&err, req);
        goto error;
    }
    const struct jv *op = jget(req, "op"), *name = jget(req, "image");
    const char *ops = op && op->t == J_STR ? op->str : "";
    if (strcmp(ops, "ping") == 0) {
        sb_printf(out, "{\"ok\": true, \"pid\": %ld}", (long)getpid());
        goto done;
    }
    if (strcmp(ops, "list") == 0) {
        size_t n = 0, i = 0;
        struct image *head = images_head();
        for (struct image *im = head; im; im = im->next)
            n++;
        struct image **all = malloc((n ? n : 1) * sizeof *all);
        if (!all) {
            sb_puts(&err, "MemoryError: out of memory");
            goto error;
        }
        for (struct image *im = head; im && i < n; im = im->next)
            all[i++] = im;
        qsort(all, n, sizeof *all, cmp_images);
        sb_puts(out, "{\"ok\": true, \"images\": {");
        for (i = 0; i < n; i++) {
            sb_puts(out, i ? ", " : "");
            sb_json_str(out, all[i]->name, strlen(all[i]->name));
            sb_puts(out, ": {");
            sb_snapshot(out, all[i]);
            sb_puts(out, "}");
        }
        sb_puts(out, "}}");
        free(all);
        goto done;
    }
    char full[PATH_MAX];
    struct stat st;
    if (!name || name->t != J_STR || name->bad || strchr(name->str, '/')
        || backing_path(full, sizeof full, name->str) || stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
        sb_puts(&err, "image ");
        sb_repr(&err, name);
        sb_printf(&err, " is not served (no such file in %s)", backing_dir);
        goto error;
    }
    struct image *im = image_get(name->str);
    if (!im) {
        sb_puts(&err, "MemoryError: out of memory");
        goto error;
    }
    if (strcmp(ops, "set") == 0) {
        struct mode m;
        if (parse_mode(jget(req, "mode"), &m, &err))
            goto error;
        image_set(im, &m);
        struct sbuf text = {0};
        sb_mode_text(&text, &m);
        logmsg("INFO", "image %s: mode %s", im->name, text.s);
        free(text.s);
    } else if (strcmp(ops, "power-cut") == 0) {
        uint64_t dropped = image_power_cut(im);
        logmsg("INFO", "image %s: power cut, %" PRIu64 " unsynced bytes dropped", im->name, dropped);
    } else if (strcmp(ops, "rearm") == 0) {
        image_rearm(im);
    } else if (strcmp(ops, "get") != 0) {
        sb_puts(&err, "unknown op ");
        sb_repr(&err, op);
        sb_puts(&err, " (ping, list, set, get, rearm, power-cut)");
        goto error;
    }
    sb_puts(out, "{\"ok\": true, ");
    sb_snapshot(out, im);
    sb_puts(out, "}");
    goto done;
error:
    reply_error(out, err.s ? err.s : "error");
done:
    free(err.s);
    jfree(req);
}

static int send_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int answer(int fd, const char *line, size_t len)
{
    struct sbuf out = {0};
    dispatch(line, len, &out);
    sb_put(&out, "\n", 1);
    int rc = send_all(fd, out.s, out.len);
    free(out.s);
    return rc;
}

/* One client connection: reply to each line until EOF (a last line without newline too). */
static void *ctl_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char *buf = malloc(MAX_LINE + 1);
    size_t len = 0;
    while (buf) {
        ssize_t n = read(fd, buf + len, MAX_LINE + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 && len > 0)
                answer(fd, buf, len);
            break;
        }
        len += (size_t)n;
        char *start = buf, *nl;
        int dead = 0;
        while (!dead && (nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            dead = answer(fd, start, (size_t)(nl - start)) != 0;
            start = nl + 1;
        }
        if (dead)
            break;
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
        if (len > MAX_LINE) {
            struct sbuf out = {0};
            reply_error(&out, "request line longer than 65536 bytes; connection closed");
            sb_put(&out, "\n", 1);
            send_all(fd, out.s, out.len);
            free(out.s);
            break;
        }
    }
    free(buf);
    close(fd);
    return NULL;
}

static void *ctl_accept(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != ECONNABORTED) {
                logmsg("WARNING", "control accept: %s", strerror(errno));
                usleep(50000); /* EMFILE and the like: do not spin */
            }
            continue;
        }
        pthread_t t;
        if (pthread_create(&t, &attr, ctl_conn, (void *)(intptr_t)fd) != 0) {
            logmsg("WARNING", "control: cannot start a connection thread");
            close(fd);
        }
    }
    return NULL;
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s --backing DIR --mount DIR --socket PATH [--max-threads N] [--host-sync]\n", prog);
}

int main(int argc, char **argv)
{
    const char *mountpoint = NULL, *socket_path = NULL;
    long max_threads = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL, *eq = strchr(a, '=');
        size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        const char *opts[] = {"--backing", "--mount", "--socket", "--max-threads"};
        int which = -1;
        for (int k = 0; k < 4; k++)
            if (strlen(opts[k]) == klen && strncmp(a, opts[k], klen) == 0)
                which = k;
        if (which >= 0) {
            val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val) {
                usage(argv[0]);
                return 2;
            }
            if (which == 0)
                backing_dir = val;
            else if (which == 1)
                mountpoint = val;
            else if (which == 2)
                socket_path = val;
            else if ((max_threads = strtol(val, NULL, 10)) < 1 || max_threads > 100000) {
                fprintf(stderr, "%s: --max-threads must be within [1, 100000]\n", argv[0]);
                return 2;
            }
        } else if (strcmp(a, "--host-sync") == 0) {
            host_sync = 1;
        } else {
            usage(argv[0]);
            return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (!backing_dir || !mountpoint || !socket_path) {
        usage(argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    images_init(backing_dir);

    /* the control socket first (as the Python daemon), served by threads that never take the
     * termination signals: those go to the main thread, whose fuse_loop_mt then returns */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof addr.sun_path) {
        logmsg("ERROR", "control socket path too long: %s", socket_path);
        return 2;
    }
    strcpy(addr.sun_path, socket_path);
    unlink(socket_path);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 64) != 0) {
        logmsg("ERROR", "control socket %s: %s", socket_path, strerror(errno));
        return 1;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_t ctl;
    int ctl_rc = pthread_create(&ctl, NULL, ctl_accept, (void *)(intptr_t)lfd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ctl_rc != 0) {
        logmsg("ERROR", "cannot start the control thread");
        return 1;
    }
    pthread_detach(ctl);
    logmsg("INFO", "serving %s at %s (control %s, pid %d, host sync %s, native, %ld threads)", backing_dir,
           mountpoint, socket_path, (int)getpid(), host_sync ? "on" : "off", max_threads);

    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    if (fuse_opt_add_arg(&args, argv[0]) || fuse_opt_add_arg(&args, "-o")
        || fuse_opt_add_arg(&args, "allow_other,auto_unmount,fsname=jbodlab-faultfs")) {
        logmsg("ERROR", "out of memory");
        return 1;
    }
    struct fuse *f = fuse_new(&args, &fs_ops, sizeof fs_ops, NULL);
    if (!f) {
        logmsg("ERROR", "fuse_new failed");
        return 1;
    }
    if (fuse_mount(f, mountpoint) != 0) {
        logmsg("ERROR", "cannot mount %s", mountpoint);
        fuse_destroy(f);
        return 1;
    }
    struct fuse_session *se = fuse_get_session(f);
    int rc = 1;
    if (fuse_set_signal_handlers(se) == 0) {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(cfg, (unsigned)max_threads);
        rc = fuse_loop_mt(f, cfg);
        fuse_loop_cfg_destroy(cfg);
        fuse_remove_signal_handlers(se);
    }
    fuse_unmount(f);
    fuse_destroy(f);
    fuse_opt_free_args(&args);
    logmsg("INFO", "unmounted, exiting");
    return rc == 0 ? 0 : 1;
}
