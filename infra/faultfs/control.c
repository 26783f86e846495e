/*
 * jbodlab-faultfs: the control socket — the Python daemon's protocol (ControlServer of
 * infra/fusefs.py): JSON lines, one reply line per request line, a thread per connection;
 * the protocol itself is described in faultfs.c.
 */
#define _GNU_SOURCE
#include "faultfs.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clocklog.h"
#include "image.h"
#include "jsonio.h"

#define MAX_LINE 65536      /* longest control request line */

static void reply_error(struct sbuf *out, const char *msg)
{
    sb_puts(out, "{\"ok\": false, \"error\": ");
    sb_json_str(out, msg, strlen(msg));
    sb_puts(out, "}");
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

void *ctl_accept(void *arg)
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
