/*
 * sdnotify — the systemd notification protocol without libsystemd: datagrams on the AF_UNIX
 * socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract namespace).
 *
 * Without $NOTIFY_SOCKET (not started by systemd, or Type= is not notify) every call is a
 * successful no-op, so the daemon behaves the same under a shell and under systemd.
 *
 * Threads: any thread; each call opens and closes its own socket, so calls never share state.
 */
#ifndef DELTAD_SDNOTIFY_H
#define DELTAD_SDNOTIFY_H

#include <stdint.h>

/* Send one notification ("READY=1\nSTATUS=serving", ...). Returns 0 (also when there is no
 * $NOTIFY_SOCKET), or a negative dd_err when the socket name is unusable or sending failed. */
int sdnotify_send(const char *state);
/* printf-style sdnotify_send. Messages longer than 1 KiB are truncated. */
int sdnotify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* READY=1 with our MAINPID and a STATUS= line (status may be NULL). */
int sdnotify_ready(const char *status);
/* STOPPING=1 with a STATUS= line (status may be NULL). */
int sdnotify_stopping(const char *status);
/* WATCHDOG=1: "the service is alive". */
int sdnotify_watchdog(void);

/* The watchdog period systemd asked for, from $WATCHDOG_USEC (and $WATCHDOG_PID, which must
 * name this process when set), in microseconds; 0 when there is no watchdog. Ping at half of
 * it. */
uint64_t sdnotify_watchdog_usec(void);

#endif
