/*
 * util — checked allocation, the growable byte buffer, error strings, assertions, logging,
 * and the fault-injection counters of test builds.
 *
 * Invariant: nothing here keeps state except the log sink, written once at start-up, and (in
 * DELTAD_FAULT_INJECTION builds only) the fault counters.
 */
#include "util.h" // defines: xmalloc, dd_buf_put, dd_log, dd_strerror

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dd_log_level = DD_LOG_INFO;
static dd_log_fn log_fn;
static void *log_ud;

const char *dd_strerror(int err)
{
    switch (err) {
#define DD_ERR_CASE(name, code, msg)                                                               \
    case code:                                                                                     \
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

/* ---- growable byte buffer ---------------------------------------------------------------- */

void dd_buf_reserve(struct dd_buf *b, size_t n)
{
    if (n + 1 <= b->cap - b->len && b->p)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
    b->p[b->len] = '\0';
}

void dd_buf_put(struct dd_buf *b, const void *s, size_t n)
{
    dd_buf_reserve(b, n);
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void dd_buf_putc(struct dd_buf *b, char c)
{
    dd_buf_put(b, &c, 1);
}

void dd_buf_puts(struct dd_buf *b, const char *s)
{
    dd_buf_put(b, s, strlen(s));
}

/* Formats straight into the spare room; a second pass after growing when it did not fit. */
void dd_buf_printf(struct dd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dd_buf_reserve(b, 0);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    if ((size_t)n >= b->cap - b->len) {
        dd_buf_reserve(b, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void dd_buf_truncate(struct dd_buf *b, size_t n)
{
    ASSERT(n <= b->len);
    b->len = n;
    if (b->p)
        b->p[n] = '\0';
}

void dd_buf_consume(struct dd_buf *b, size_t n)
{
    ASSERT(n <= b->len);
    if (n == 0)
        return;
    memmove(b->p, b->p + n, b->len - n);
    dd_buf_truncate(b, b->len - n);
}

char *dd_buf_take(struct dd_buf *b, size_t *len)
{
    dd_buf_reserve(b, 0);
    char *p = b->p;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

void dd_buf_free(struct dd_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void *dd_try_malloc(size_t n)
{
    return dd_fault_hit(DD_FAULT_ALLOC) ? NULL : malloc(n ? n : 1);
}

void *dd_try_realloc(void *p, size_t n)
{
    return dd_fault_hit(DD_FAULT_ALLOC) ? NULL : realloc(p, n ? n : 1);
}

/* ---- fault injection ---------------------------------------------------------------------- */
#ifdef DELTAD_FAULT_INJECTION
/* One fault point: calls counted so far, and the schedule read from its variable ("N" or
 * "N+M"; first = 0 disables it). */
struct fault {
    const char *env;
    _Atomic long long calls;
    _Atomic int ready; /* 0 unread, 1 being read, 2 read */
    long long first, every;
};

static struct fault faults[DD_FAULT_N] = {{.env = "DELTAD_FAIL_ALLOC"},
                                          {.env = "DELTAD_FAIL_STEP"}};

/* Read the schedule once; concurrent first callers wait for the one that reads it. */
static void fault_read(struct fault *f)
{
    int expect = 0;
    if (atomic_compare_exchange_strong(&f->ready, &expect, 1)) {
        const char *v = getenv(f->env);
        char *end = NULL;
        f->first = v ? strtoll(v, &end, 10) : 0;
        f->every = end && *end == '+' ? strtoll(end + 1, NULL, 10) : 0;
        if (f->first < 0)
            f->first = 0;
        atomic_store(&f->ready, 2);
    }
    while (atomic_load(&f->ready) != 2)
        ;
}

bool dd_fault_hit(enum dd_fault which)
{
    struct fault *f = &faults[which];
    if (atomic_load_explicit(&f->ready, memory_order_acquire) != 2)
        fault_read(f);
    if (f->first == 0)
        return false;
    long long n = atomic_fetch_add(&f->calls, 1) + 1;
    bool hit = n == f->first || (f->every > 0 && n > f->first && (n - f->first) % f->every == 0);
    if (hit)
        fprintf(stderr, "<4>deltad: fault injection: %s call %lld fails\n", f->env, n);
    return hit;
}
#endif

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

bool dd_progress_on(void)
{
    static int tty = -1; /* stderr does not change into a terminal later */
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    return tty && dd_log_level >= DD_LOG_INFO;
}

bool dd_progress(bool done, const char *fmt, ...)
{
    if (!dd_progress_on())
        return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r%s\033[K%s", msg, done ? "\n" : "");
    fflush(stderr);
    return true;
}

double dd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A whole file (malloc'd, *len set), or NULL with errno. */
char *dd_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            buf = xrealloc(buf, cap + 1);
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
