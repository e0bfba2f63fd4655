/*
 * util — checked allocation, error strings, assertions and logging.
 *
 * Invariant: nothing here keeps state except the log sink, written once at start-up.
 */
#include "util.h" // defines: xmalloc, dd_log, dd_strerror

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dd_log_level = DD_LOG_INFO;
static dd_log_fn log_fn;
static void *log_ud;

const char *dd_strerror(int err)
{
    switch (err) {
#define DD_ERR_CASE(name, code, msg)                                                              \
    case code:                                                                                    \
        return msg;
        DD_ERRNO_MAP(DD_ERR_CASE)
#undef DD_ERR_CASE
    }
    return "unknown error";
}

static _Noreturn void oom(size_t n)
{
    fprintf(stderr, "<2>deltad: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

void *xaligned_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        oom(n);
    return p;
}

void dd_errf(char *buf, size_t cap, const char *fmt, ...)
{
    if (!buf || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

_Noreturn void dd_abort(const char *file, int line, const char *expr)
{
    fprintf(stderr, "<2>deltad: assertion failed at %s:%d: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

void dd_log_set(dd_log_fn fn, void *ud)
{
    log_fn = fn;
    log_ud = ud;
}

void dd_log(enum dd_log_level lvl, const char *func, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(lvl, func, msg, log_ud);
        return;
    }
    static const char *names[] = {"error", "warn", "info", "debug"};
    static const int prio[] = {3, 4, 6, 7};
    fprintf(stderr, "<%d>%s %s: %s\n", prio[lvl], names[lvl], func, msg);
}

double dd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
