/*
 * sdnotify — sd_notify(3) re-done in a few lines (see sdnotify.h).
 *
 * The protocol: one datagram of "KEY=VALUE" lines to the AF_UNIX socket in $NOTIFY_SOCKET.
 * A name starting with '@' lives in the abstract namespace: the '@' becomes a NUL byte and the
 * address length covers exactly the name (no trailing NUL). We do not support the "vsock:"
 * form (VMs); it is reported as unsupported, once.
 *
 * Invariant: no state is kept between calls; nothing here allocates.
 */
#include "sdnotify.h" // defines: sdnotify_send

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine/util.h" // defines: dd_err codes, LOG_W

/* Fill addr from $NOTIFY_SOCKET. Returns the address length, 0 when unset, or a negative
 * dd_err when the name is unusable. */
static int notify_addr(struct sockaddr_un *addr)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (!name || !*name)
        return 0;
    size_t len = strlen(name);
    if ((name[0] != '/' && name[0] != '@') || len >= sizeof addr->sun_path)
        return DD_EUNSUPPORTED;
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, name, len);
    if (name[0] == '@') {
        addr->sun_path[0] = '\0';
        return (int)(offsetof(struct sockaddr_un, sun_path) + len);
    }
    return (int)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

int sdnotify_send(const char *state)
{
    static atomic_int warned; /* warn once per process */
    struct sockaddr_un addr;
    int alen = notify_addr(&addr);
    if (alen == 0)
        return 0;
    if (alen < 0) {
        if (atomic_fetch_add(&warned, 1) == 0)
            LOG_W("NOTIFY_SOCKET '%s' is not an AF_UNIX path or @name; notifications are off",
                  getenv("NOTIFY_SOCKET"));
        return alen;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return DD_EIO;
    size_t len = strlen(state);
    ssize_t n = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&addr, (socklen_t)alen);
    int saved = errno;
    close(fd);
    if (n != (ssize_t)len) {
        if (atomic_fetch_add(&warned, 1) == 0)
            LOG_W("sd_notify to %s failed: %s (further failures are not logged)",
                  getenv("NOTIFY_SOCKET"), strerror(saved));
        return DD_EIO;
    }
    return 0;
}

int sdnotify_sendf(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sdnotify_send(msg);
}

int sdnotify_ready(const char *status)
{
    return sdnotify_sendf("READY=1\nMAINPID=%ld\nSTATUS=%s", (long)getpid(),
                          status ? status : "ready");
}

int sdnotify_stopping(const char *status)
{
    return sdnotify_sendf("STOPPING=1\nSTATUS=%s", status ? status : "stopping");
}

int sdnotify_watchdog(void)
{
    return sdnotify_send("WATCHDOG=1");
}

uint64_t sdnotify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!usec || !*usec)
        return 0;
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0; /* meant for another process (e.g. our parent) */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(usec, &end, 10);
    if (errno || *end || v == 0)
        return 0;
    return (uint64_t)v;
}
