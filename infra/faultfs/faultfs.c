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
 * default 64). read, write and fsync of an image pass through its mode (imageio.c: the gate,
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
 * Files: faultfs.c (main: options, the control socket's start, the FUSE loop), fuseops.c
 * (the FUSE operations), control.c (the control protocol), image.c (the images: switching a
 * mode, the snapshot), imageio.c (an op through its image's mode: the gate, then the
 * effects), mode.c (the modes: parsing, what a mode decides), ranges.c (byte ranges, the
 * bad-block table), cache.c (lose-unsynced's volatile cache), prng.c (the flaky PRNG, the
 * corruption hash), jsonread.c and jsonwrite.c (JSON as Python reads and writes it),
 * clocklog.c (the clock, the log line). Each header declares what its files lend to the
 * others; faultfs.h is what main, the FUSE operations and the control socket share.
 */
#define _GNU_SOURCE
#include "faultfs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clocklog.h"
#include "image.h"

const char *backing_dir;
int host_sync;

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
