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
 * default 64). read, write and fsync of an image pass its fault gate (the semantics of
 * ImageState.gate): count the op; mode ok -> pass; the mode always fails the op, or flaky and
 * a draw < p -> count injected, EIO; delay -> sleep delay_ms, pass. The flaky PRNG
 * (xoshiro256**) is reseeded with the mode's seed whenever a mode is set, so a seeded
 * sequence replays (it is not Python's random sequence). --host-sync: a guest flush that
 * passed the gate is also fdatasync'd/fsync'd on the host and counted in host_syncs.
 * Requests run in parallel: the only locks are one mutex per image, held for the counters and
 * the draw, never across I/O or a delay.
 *
 * Control: the Python daemon's protocol on --socket (Unix stream, JSON lines, one reply line
 * per request line, a thread per connection): {"op": "ping"} -> {"ok": true, "pid": N};
 * {"op": "list"} -> {"ok": true, "images": {NAME: SNAPSHOT, ...}}; {"op": "set", "image":
 * NAME, "mode": {"kind": K, "p": P, "seed": S, "delay_ms": D}} and {"op": "get", "image":
 * NAME} -> {"ok": true, SNAPSHOT...}, SNAPSHOT = "mode", "since_ns", "ops", "injected",
 * "host_syncs", serialized as Python's json.dumps does. A bad request gets {"ok": false,
 * "error": "..."}; nothing a client sends can stop the daemon.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define MAX_LINE 65536      /* longest control request line */
#define MAX_DEPTH 32        /* deepest JSON nesting accepted in a request */

static const char *backing_dir;
static int host_sync;

/* ---- small helpers -------------------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One log line on stderr, formatted like the Python daemon's ("%(asctime)s fusefs LEVEL msg"). */
static void logmsg(const char *level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - n, ",%03ld faultfs %s ", ts.tv_nsec / 1000000, level);
    va_list ap;
    va_start(ap, fmt);
    if (n < sizeof line)
        n += vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* "<backing>/<name>" into buf; -ENAMETOOLONG if it does not fit. */
static int backing_path(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", backing_dir, name);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

/* A growable string. */
struct sbuf {
    char *s;
    size_t len, cap;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *s2 = realloc(b->s, cap);
        if (!s2)
            abort(); /* out of memory: nothing sensible left to do */
        b->s = s2;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string as Python's json.dumps writes it (ensure_ascii): \uXXXX for everything
 * outside ' '..'~', bytes that are not UTF-8 as the surrogates Python decodes them to. */
static void sb_json_str(struct sbuf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    sb_put(b, "\"", 1);
    while (p < end) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
            p++;
            continue;
        }
        if (c >= 0x20 && c < 0x7f) {
            sb_put(b, (const char *)p, 1);
            p++;
            continue;
        }
        const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) {
            sb_puts(b, esc);
            p++;
            continue;
        }
        uint32_t cp = c;
        int len = 1;
        if (c >= 0xc2 && c <= 0xdf)
            len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            len = 4, cp = c & 0x07;
        int ok = c < 0x80 || (len > 1 && p + len <= end);
        for (int i = 1; ok && i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                ok = 0;
            else
                cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (ok && len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            ok = 0;
        if (ok && len == 4 && (cp < 0x10000 || cp > 0x10ffff))
            ok = 0;
        if (!ok) { /* surrogateescape */
            cp = 0xdc00 | c;
            len = 1;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            sb_printf(b, "\\u%04x\\u%04x", 0xd800 | (cp >> 10), 0xdc00 | (cp & 0x3ff));
        } else {
            sb_printf(b, "\\u%04x", cp);
        }
        p += len;
    }
    sb_put(b, "\"", 1);
}

/* A float as Python's repr() (and json.dumps) writes it: shortest round trip, "1.0", "1e-05". */
static void sb_pyfloat(struct sbuf *b, double x, int json)
{
    if (isnan(x)) {
        sb_puts(b, json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        sb_puts(b, x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
        return;
    }
    char tmp[48], digits[24];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    const char *p = tmp;
    if (*p == '-') {
        sb_put(b, "-", 1);
        p++;
    }
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                sb_put(b, i < nd ? &digits[i] : "0", 1);
            sb_put(b, ".", 1);
            if (nd > exp10 + 1)
                sb_puts(b, digits + exp10 + 1);
            else
                sb_put(b, "0", 1);
        } else {
            sb_puts(b, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                sb_put(b, "0", 1);
            sb_puts(b, digits);
        }
    } else {
        sb_put(b, digits, 1);
        if (nd > 1) {
            sb_put(b, ".", 1);
            sb_puts(b, digits + 1);
        }
        sb_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
}

/* ---- fault modes and the per-image gate ----------------------------------------------- */

enum kind { K_OK, K_ERROR, K_ERROR_READS, K_ERROR_WRITES, K_FLAKY, K_DELAY, K_REMOVED, K_COUNT };
static const char *const KIND_NAMES[K_COUNT] = {"ok", "error", "error-reads", "error-writes",
                                                "flaky", "delay", "removed"};
enum op { OP_READ, OP_WRITE, OP_FSYNC, OP_COUNT };
static const char *const OP_NAMES[OP_COUNT] = {"read", "write", "fsync"};

struct mode {
    enum kind kind;
    double p;
    int64_t seed;
    double delay_ms;
};

/* FaultMode.fails: the mode always fails this op (flaky and delay never "always" do). */
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

/* str(FaultMode): ok, flaky:P:SEED, delay:MS, ... */
static void sb_mode_text(struct sbuf *b, const struct mode *m)
{
    if (m->kind == K_FLAKY)
        sb_printf(b, "flaky:%g:%" PRId64, m->p, m->seed);
    else if (m->kind == K_DELAY)
        sb_printf(b, "delay:%g", m->delay_ms);
    else
        sb_puts(b, KIND_NAMES[m->kind]);
}

/* xoshiro256** seeded through splitmix64: the flaky draws. */
struct rng {
    uint64_t s[4];
};

static void rng_seed(struct rng *r, int64_t seed)
{
    uint64_t x = (uint64_t)seed;
    for (int i = 0; i < 4; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r->s[i] = z ^ (z >> 31);
    }
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static double rng_next(struct rng *r) /* uniform in [0, 1) */
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

/* One served image: mode, PRNG, counters. Created on first use (open, I/O, control) and never
 * freed; the list only grows, at its head, so readers walk it without a lock. */
struct image {
    struct image *next;
    pthread_mutex_t lock;
    struct mode mode;
    struct rng rng;
    int64_t since_ns;
    uint64_t ops[OP_COUNT], injected[OP_COUNT], host_syncs;
    char name[];
};

static _Atomic(struct image *) images;
static pthread_mutex_t images_lock = PTHREAD_MUTEX_INITIALIZER;

static struct image *image_find(const char *name)
{
    for (struct image *im = atomic_load_explicit(&images, memory_order_acquire); im; im = im->next)
        if (strcmp(im->name, name) == 0)
            return im;
    return NULL;
}

static struct image *image_get(const char *name) /* NULL only when out of memory */
{
    struct image *im = image_find(name);
    if (im)
        return im;
    pthread_mutex_lock(&images_lock);
    im = image_find(name);
    if (!im && (im = calloc(1, sizeof *im + strlen(name) + 1))) {
        pthread_mutex_init(&im->lock, NULL);
        rng_seed(&im->rng, 0);
        im->since_ns = now_ns();
        strcpy(im->name, name);
        im->next = atomic_load_explicit(&images, memory_order_relaxed);
        atomic_store_explicit(&images, im, memory_order_release);
    }
    pthread_mutex_unlock(&images_lock);
    return im;
}

static void image_set(struct image *im, const struct mode *m)
{
    pthread_mutex_lock(&im->lock);
    im->mode = *m;
    rng_seed(&im->rng, m->seed);
    im->since_ns = now_ns();
    memset(im->injected, 0, sizeof im->injected);
    pthread_mutex_unlock(&im->lock);
}

/* ImageState.gate: 0 to go on with the op, or -EIO. */
static int gate(struct image *im, enum op op)
{
    pthread_mutex_lock(&im->lock);
    im->ops[op]++;
    struct mode m = im->mode;
    int fail = 0;
    if (m.kind != K_OK) {
        fail = mode_fails(&m, op) || (m.kind == K_FLAKY && rng_next(&im->rng) < m.p);
        if (fail)
            im->injected[op]++;
    }
    pthread_mutex_unlock(&im->lock);
    if (fail)
        return -EIO;
    if (m.kind == K_DELAY && m.delay_ms > 0) {
        double s = m.delay_ms / 1000.0;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    return 0;
}

/* ImageState.snapshot as JSON members (no braces): "mode": {...}, "since_ns": ..., ... */
static void sb_snapshot(struct sbuf *b, struct image *im)
{
    pthread_mutex_lock(&im->lock);
    struct mode m = im->mode;
    int64_t since = im->since_ns;
    uint64_t ops[OP_COUNT], inj[OP_COUNT], syncs = im->host_syncs;
    memcpy(ops, im->ops, sizeof ops);
    memcpy(inj, im->injected, sizeof inj);
    pthread_mutex_unlock(&im->lock);
    sb_printf(b, "\"mode\": {\"kind\": \"%s\", \"p\": ", KIND_NAMES[m.kind]);
    sb_pyfloat(b, m.p, 1);
    sb_printf(b, ", \"seed\": %" PRId64 ", \"delay_ms\": ", m.seed);
    sb_pyfloat(b, m.delay_ms, 1);
    sb_printf(b, "}, \"since_ns\": %" PRId64, since);
    const uint64_t *counts[2] = {ops, inj};
    for (int k = 0; k < 2; k++) {
        sb_puts(b, k ? ", \"injected\": {" : ", \"ops\": {");
        for (int i = 0; i < OP_COUNT; i++)
            sb_printf(b, "%s\"%s\": %" PRIu64, i ? ", " : "", OP_NAMES[i], counts[k][i]);
        sb_puts(b, "}");
    }
    sb_printf(b, ", \"host_syncs\": %" PRIu64, syncs);
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
    if (rc || (rc = gate(im, OP_READ)))
        return rc;
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int fs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct image *im;
    int rc = image_of(path, &im);
    if (rc || (rc = gate(im, OP_WRITE)))
        return rc;
    ssize_t n = pwrite((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    struct image *im;
    int rc = image_of(path, &im);
    if (rc || (rc = gate(im, OP_FSYNC)))
        return rc;
    if (host_sync) {
        if ((datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh)) != 0)
            return -errno;
        pthread_mutex_lock(&im->lock);
        im->host_syncs++;
        pthread_mutex_unlock(&im->lock);
    }
    return 0;
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

/* ---- a minimal JSON reader for control requests ------------------------------------- */

enum jtype { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    enum jtype t;
    double num;
    int is_int;           /* J_NUM written without fraction or exponent */
    int int_ok;           /* ... and it fits ival */
    long long ival;
    const char *tok;      /* J_NUM: its text */
    size_t toklen;
    char *str;            /* J_STR: decoded UTF-8, NUL-terminated */
    size_t len;
    int bad;              /* J_STR holds NUL or a lone surrogate: never a usable name */
    char *key;            /* member name inside an object */
    struct jv *first, *next;
};

struct jparse {
    const char *p, *start, *end;
    const char *err;
    int depth;
};

static void jfree(struct jv *v)
{
    while (v) {
        struct jv *next = v->next;
        jfree(v->first);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

static void jws(struct jparse *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jlit(struct jparse *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) >= n && memcmp(j->p, lit, n) == 0) {
        j->p += n;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static char *jstring(struct jparse *j, size_t *len, int *bad) /* at the opening quote */
{
    struct sbuf b = {0};
    j->p++;
    sb_put(&b, "", 0);
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            j->err = "Invalid control character";
            goto fail;
        }
        if (c != '\\') {
            sb_put(&b, j->p++, 1);
            continue;
        }
        if (j->end - j->p < 2) {
            j->err = "Unterminated string";
            goto fail;
        }
        char e = j->p[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            sb_put(&b, &map[simple - "\"\\/bfnrt"], 1);
            j->p += 2;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || j->end - j->p < 6 || !hex4(j->p + 2, &cp)) {
            j->err = "Invalid \\escape";
            goto fail;
        }
        j->p += 6;
        if (cp >= 0xd800 && cp <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u'
            && hex4(j->p + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            j->p += 6;
        } else if (cp >= 0xdc80 && cp <= 0xdcff) { /* surrogateescape: the raw byte */
            char raw = (char)(cp & 0xff);
            sb_put(&b, &raw, 1);
            continue;
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            *bad = 1;
            cp = 0xfffd;
        }
        if (cp == 0)
            *bad = 1;
        char u[4];
        int n;
        if (cp < 0x80)
            u[0] = (char)cp, n = 1;
        else if (cp < 0x800)
            u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
        else if (cp < 0x10000)
            u[0] = (char)(0xe0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
            u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
        else
            u[0] = (char)(0xf0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
        sb_put(&b, u, (size_t)n);
    }
    if (j->p >= j->end) {
        j->err = "Unterminated string";
        goto fail;
    }
    j->p++;
    *len = b.len;
    return b.s;
fail:
    free(b.s);
    return NULL;
}

static struct jv *jvalue(struct jparse *j);

static struct jv *jcontainer(struct jparse *j, struct jv *v, char close)
{
    if (++j->depth > MAX_DEPTH) {
        j->err = "nesting too deep";
        goto fail;
    }
    j->p++;
    jws(j);
    struct jv **tail = &v->first;
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        jws(j);
        if (close == '}') {
            size_t klen;
            int kbad = 0;
            if (j->p >= j->end || *j->p != '"') {
                j->err = "Expecting property name enclosed in double quotes";
                goto fail;
            }
            if (!(key = jstring(j, &klen, &kbad)))
                goto fail;
            jws(j);
            if (j->p >= j->end || *j->p != ':') {
                free(key);
                j->err = "Expecting ':' delimiter";
                goto fail;
            }
            j->p++;
        }
        struct jv *item = jvalue(j);
        if (!item) {
            free(key);
            goto fail;
        }
        item->key = key;
        *tail = item;
        tail = &item->next;
        jws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            j->depth--;
            return v;
        }
        j->err = "Expecting ',' delimiter";
        goto fail;
    }
fail:
    jfree(v);
    return NULL;
}

static struct jv *jvalue(struct jparse *j)
{
    jws(j);
    struct jv *v = calloc(1, sizeof *v);
    if (!v) {
        j->err = "out of memory";
        return NULL;
    }
    if (j->p >= j->end)
        goto expecting;
    switch (*j->p) {
    case '{':
        v->t = J_OBJ;
        return jcontainer(j, v, '}');
    case '[':
        v->t = J_ARR;
        return jcontainer(j, v, ']');
    case '"':
        v->t = J_STR;
        if (!(v->str = jstring(j, &v->len, &v->bad)))
            goto fail;
        return v;
    }
    if (jlit(j, "null"))
        v->t = J_NULL;
    else if (jlit(j, "true"))
        v->t = J_TRUE;
    else if (jlit(j, "false"))
        v->t = J_FALSE;
    else if (jlit(j, "NaN"))
        v->t = J_NUM, v->num = NAN, v->tok = "nan", v->toklen = 3;
    else if (jlit(j, "Infinity"))
        v->t = J_NUM, v->num = INFINITY, v->tok = "inf", v->toklen = 3;
    else if (jlit(j, "-Infinity"))
        v->t = J_NUM, v->num = -INFINITY, v->tok = "-inf", v->toklen = 4;
    else { /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
        const char *s = j->p, *p = s;
        if (p < j->end && *p == '-')
            p++;
        if (p >= j->end || *p < '0' || *p > '9')
            goto expecting;
        if (*p == '0')
            p++;
        else
            while (p < j->end && *p >= '0' && *p <= '9')
                p++;
        v->is_int = 1;
        if (p + 1 < j->end && *p == '.' && p[1] >= '0' && p[1] <= '9') {
            v->is_int = 0;
            for (p++; p < j->end && *p >= '0' && *p <= '9'; p++)
                ;
        }
        if (p < j->end && (*p == 'e' || *p == 'E')) {
            const char *q = p + 1;
            if (q < j->end && (*q == '+' || *q == '-'))
                q++;
            if (q < j->end && *q >= '0' && *q <= '9') {
                v->is_int = 0;
                for (p = q; p < j->end && *p >= '0' && *p <= '9'; p++)
                    ;
            }
        }
        char tmp[64];
        size_t n = (size_t)(p - s);
        v->t = J_NUM;
        v->tok = s;
        v->toklen = n;
        if (n >= sizeof tmp) { /* a long literal: only its float value matters */
            char *big = strndup(s, n);
            if (!big)
                goto expecting;
            v->num = strtod(big, NULL);
            free(big);
        } else {
            memcpy(tmp, s, n);
            tmp[n] = '\0';
            v->num = strtod(tmp, NULL);
            if (v->is_int) {
                errno = 0;
                v->ival = strtoll(tmp, NULL, 10);
                v->int_ok = errno == 0;
            }
        }
        j->p = p;
    }
    return v;
expecting:
    j->err = "Expecting value";
fail:
    jfree(v);
    return NULL;
}

static struct jv *jparse(const char *s, size_t n, struct sbuf *err)
{
    struct jparse j = {s, s, s + n, NULL, 0};
    struct jv *v = jvalue(&j);
    if (v) {
        jws(&j);
        if (j.p < j.end) {
            jfree(v);
            v = NULL;
            j.err = "Extra data";
        }
    }
    if (!v)
        sb_printf(err, "JSONDecodeError: %s: line 1 column %ld (char %ld)", j.err ? j.err : "?",
                  (long)(j.p - s) + 1, (long)(j.p - s));
    return v;
}

static struct jv *jget(const struct jv *obj, const char *key) /* the last member of that name */
{
    struct jv *found = NULL;
    for (struct jv *m = obj->first; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0)
            found = m;
    return found;
}

/* Python's repr() of a JSON value, for error messages. */
static void sb_repr(struct sbuf *b, const struct jv *v)
{
    if (!v || v->t == J_NULL) {
        sb_puts(b, "None");
        return;
    }
    switch (v->t) {
    case J_TRUE: sb_puts(b, "True"); return;
    case J_FALSE: sb_puts(b, "False"); return;
    case J_NUM:
        if (v->is_int)
            sb_put(b, v->tok, v->toklen);
        else
            sb_pyfloat(b, v->num, 0);
        return;
    case J_STR:
        sb_put(b, "'", 1);
        for (size_t i = 0; i < v->len; i++) {
            unsigned char c = (unsigned char)v->str[i];
            if (c == '\'' || c == '\\')
                sb_printf(b, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                sb_printf(b, "\\x%02x", c);
            else
                sb_put(b, &v->str[i], 1);
        }
        sb_put(b, "'", 1);
        return;
    default: {
        int obj = v->t == J_OBJ;
        sb_puts(b, obj ? "{" : "[");
        for (const struct jv *m = v->first; m; m = m->next) {
            if (m != v->first)
                sb_puts(b, ", ");
            if (obj) {
                struct jv k = {.t = J_STR, .str = m->key, .len = strlen(m->key)};
                sb_repr(b, &k);
                sb_puts(b, ": ");
            }
            sb_repr(b, m);
        }
        sb_puts(b, obj ? "}" : "]");
    }
    }
}

static int jtruthy(const struct jv *v)
{
    if (!v)
        return 0;
    switch (v->t) {
    case J_NULL: case J_FALSE: return 0;
    case J_TRUE: return 1;
    case J_NUM: return v->num != 0;
    case J_STR: return v->len > 0;
    default: return v->first != NULL;
    }
}

/* ---- control requests ------------------------------------------------------------------ */

static void reply_error(struct sbuf *out, const char *msg)
{
    sb_puts(out, "{\"ok\": false, \"error\": ");
    sb_json_str(out, msg, strlen(msg));
    sb_puts(out, "}");
}

/* float(x) of a mode field: 0 or an error text in err. */
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

/* FaultMode.from_dict + its validation, with the Python messages. */
static int parse_mode(const struct jv *v, struct mode *m, struct sbuf *err)
{
    const struct jv empty = {.t = J_OBJ};
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
        sb_puts(err, " is unknown (choose from ok, error, error-reads, error-writes, flaky, delay, removed)");
        return -1;
    }
    if (mode_float(jget(v, "p"), "p", 0.0, &m->p, err) || mode_float(jget(v, "delay_ms"), "delay_ms", 0.0, &m->delay_ms, err))
        return -1;
    m->seed = 0;
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
    if (m->kind == K_DELAY && !(m->delay_ms >= 0.0 && m->delay_ms <= 600000.0)) {
        sb_puts(err, "ValueError: delay_ms=");
        sb_pyfloat(err, m->delay_ms, 0);
        sb_puts(err, " must be within [0, 600000]");
        return -1;
    }
    return 0;
}

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
        struct image *head = atomic_load_explicit(&images, memory_order_acquire);
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
    } else if (strcmp(ops, "get") != 0) {
        sb_puts(&err, "unknown op ");
        sb_repr(&err, op);
        sb_puts(&err, " (ping, list, set, get)");
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
