/* jbodlab-faultfs: the clock and the log line. */
#ifndef JBODLAB_CLOCKLOG_H
#define JBODLAB_CLOCKLOG_H

#include <stdint.h>

int64_t now_ns(void);     /* CLOCK_REALTIME, ns */
/* one log line on stderr, formatted like the Python daemon's */
void logmsg(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
