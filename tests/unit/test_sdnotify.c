/*
 * test_sdnotify — server/http/sdnotify.c against a real datagram socket: a filesystem path and an
 * abstract ('@') name both receive exactly the messages sent; without NOTIFY_SOCKET every call
 * is a no-op; an unusable name is refused; WATCHDOG_USEC / WATCHDOG_PID are honoured.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine/util.h"
#include "server/http/sdnotify.h"
#include "test.h"

/* A datagram socket bound to name ('@' = abstract). Returns the fd or -1. */
static int listener(const char *name)
{
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t len = strlen(name);
    memcpy(a.sun_path, name, len);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (name[0] == '@')
        a.sun_path[0] = '\0';
    else
        unlink(name);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, alen) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Receive one datagram into buf (NUL-terminated); "" on timeout. */
static const char *recv_msg(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void exchange(const char *name)
{
    char buf[1024], expect[128];
    int fd = listener(name);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    setenv("NOTIFY_SOCKET", name, 1);
    CHECK_EQ(sdnotify_ready("serving tiny"), 0);
    snprintf(expect, sizeof expect, "READY=1\nMAINPID=%ld\nSTATUS=serving tiny", (long)getpid());
    CHECK_STR_EQ(recv_msg(fd, buf, sizeof buf), expect);
    CHECK_EQ(sdnotify_watchdog(), 0);
    CHECK_STR_EQ(recv_msg(fd, buf, sizeof buf), "WATCHDOG=1");
    CHECK_EQ(sdnotify_stopping(NULL), 0);
    CHECK_STR_EQ(recv_msg(fd, buf, sizeof buf), "STOPPING=1\nSTATUS=stopping");
    CHECK_EQ(sdnotify_sendf("STATUS=%d slots", 4), 0);
    CHECK_STR_EQ(recv_msg(fd, buf, sizeof buf), "STATUS=4 slots");
    close(fd);
    unsetenv("NOTIFY_SOCKET");
}

TEST(path_socket)
{
    char name[64];
    snprintf(name, sizeof name, "/tmp/test_sdnotify.%ld", (long)getpid());
    exchange(name);
    unlink(name);
}

TEST(abstract_socket)
{
    char name[64];
    snprintf(name, sizeof name, "@test_sdnotify.%ld", (long)getpid());
    exchange(name);
}

TEST(no_socket_is_noop)
{
    unsetenv("NOTIFY_SOCKET");
    CHECK_EQ(sdnotify_ready("x"), 0);
    CHECK_EQ(sdnotify_watchdog(), 0);
    setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    CHECK_EQ(sdnotify_watchdog(), DD_EUNSUPPORTED);
    setenv("NOTIFY_SOCKET", "/nonexistent/dir/socket", 1);
    CHECK_EQ(sdnotify_watchdog(), DD_EIO);
    unsetenv("NOTIFY_SOCKET");
}

TEST(watchdog_env)
{
    char pid[32];
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    CHECK_EQ(sdnotify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    CHECK_EQ(sdnotify_watchdog_usec(), 30000000);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    CHECK_EQ(sdnotify_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", "1", 1);
    CHECK_EQ(sdnotify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "soon", 1);
    CHECK_EQ(sdnotify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
}

int main(void)
{
    RUN(path_socket);
    RUN(abstract_socket);
    RUN(no_socket_is_noop);
    RUN(watchdog_env);
    TEST_MAIN_END("test_sdnotify");
}
