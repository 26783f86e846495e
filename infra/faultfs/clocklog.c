/* jbodlab-faultfs: the clock and the log line (see clocklog.h). */
#define _GNU_SOURCE
#include "clocklog.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One log line on stderr, formatted like the Python daemon's ("%(asctime)s fusefs LEVEL msg"). */
void logmsg(const char *level, const char *fmt, ...)
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
