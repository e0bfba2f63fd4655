/*
 * util — the small things every module uses: checked allocation, assertions that stay on in
 * release builds, error codes, and the one logging entry point.
 *
 * Thread safety: everything here may be called from any thread. The log callback and level are
 * set once at start-up, before threads start.
 */
#ifndef DELTAD_UTIL_H
#define DELTAD_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- errors: one table, negative codes ---------------------------------------------------- */
#define DD_ERRNO_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(EFORMAT, -4, "malformed file")                                                               \
    X(ENOTFOUND, -5, "not found")                                                                  \
    X(ETYPE, -6, "wrong type")                                                                     \
    X(EUNSUPPORTED, -7, "unsupported")                                                             \
    X(ERANGE, -8, "out of range")                                                                  \
    X(EFULL, -9, "capacity exceeded")

enum dd_err {
#define DD_ERR_ENUM(name, code, msg) DD_##name = code,
    DD_ERRNO_MAP(DD_ERR_ENUM)
#undef DD_ERR_ENUM
};

/* Static string for an error code; never NULL. */
const char *dd_strerror(int err);

/* ---- allocation: small internal allocations abort on OOM (STYLE rule 16) ------------------ */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* A whole file, NUL-terminated (malloc'd, *len set to its length without the NUL), or NULL
 * with errno set. */
char *dd_read_file(const char *path, size_t *len);
/* 64-byte aligned allocation for SIMD buffers; release with free(). Aborts on OOM. */
void *xaligned_alloc(size_t n);
/* Fallible allocation for user-sized buffers (request bodies, parsed request trees): NULL on
 * failure, which the caller turns into an error reply. Release with free(). These are the only
 * allocations DELTAD_FAIL_ALLOC fails (docs/bad-inputs.md lists the paths that use them). */
void *dd_try_malloc(size_t n);
void *dd_try_realloc(void *p, size_t n);

/* ---- growable byte buffer ----------------------------------------------------------------- */
/*
 * The one growable byte buffer: appends grow it by doubling (xrealloc, so they abort on OOM
 * like any internal allocation; callers that take user-sized input bound it first). p is NULL
 * until the first append and NUL-terminated after it, so p[len] == '\0' whenever p != NULL.
 * A zeroed struct is an empty buffer. Owned by whoever holds the struct; not thread-safe.
 */
struct dd_buf {
    char *p;    /* [cap] owned; p[0..len) the bytes, p[len] == '\0' */
    size_t len; /* bytes held, without the NUL */
    size_t cap; /* allocation size */
};
/* Make room for n more bytes (and the NUL) so the next appends up to n do not reallocate. */
void dd_buf_reserve(struct dd_buf *b, size_t n);
void dd_buf_put(struct dd_buf *b, const void *s, size_t n);
void dd_buf_putc(struct dd_buf *b, char c);
void dd_buf_puts(struct dd_buf *b, const char *s);
void dd_buf_printf(struct dd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Keep the first n bytes (n <= len); the allocation stays. */
void dd_buf_truncate(struct dd_buf *b, size_t n);
/* Drop the first n bytes (n <= len), moving the rest to the front. */
void dd_buf_consume(struct dd_buf *b, size_t n);
/* Hand the bytes over (malloc'd, NUL-terminated, "" for an empty buffer; *len set when len is
 * not NULL; the caller frees) and leave b empty. */
char *dd_buf_take(struct dd_buf *b, size_t *len);
/* Release the bytes and leave b empty; freeing twice is harmless. */
void dd_buf_free(struct dd_buf *b);

/* ---- fault injection (STYLE rule 35) ------------------------------------------------------ */
/* Compiled in only with -DDELTAD_FAULT_INJECTION (make FAULT=1); otherwise dd_fault_hit is a
 * constant false. Each fault point counts its calls process-wide and fails the ones its
 * environment variable names: "N" fails call N (1-based) only, "N+M" fails call N and every
 * M-th call after it.
 *   DD_FAULT_ALLOC  DELTAD_FAIL_ALLOC  dd_try_malloc / dd_try_realloc return NULL
 *   DD_FAULT_STEP   DELTAD_FAIL_STEP   the engine's forward step reports failure
 * Thread safety: any thread (atomic counters; the variables are read once). */
enum dd_fault { DD_FAULT_ALLOC = 0, DD_FAULT_STEP, DD_FAULT_N };
#ifdef DELTAD_FAULT_INJECTION
bool dd_fault_hit(enum dd_fault f);
#else
static inline bool dd_fault_hit(enum dd_fault f)
{
    (void)f;
    return false;
}
#endif

/* Format into a caller buffer; always NUL-terminates (no-op when cap == 0). */
void dd_errf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- assertions (STYLE rule 19) ----------------------------------------------------------- */
_Noreturn void dd_abort(const char *file, int line, const char *expr);
#define ASSERT(x) ((x) ? (void)0 : dd_abort(__FILE__, __LINE__, #x))
#ifdef NDEBUG
#define DASSERT(x) ((void)0)
#else
#define DASSERT(x) ASSERT(x)
#endif
/* ALWAYS/NEVER: "cannot happen" branches that must degrade gracefully in release. */
#define ALWAYS(x) (x)
#define NEVER(x) (x)

/* ---- logging (STYLE rule 21) -------------------------------------------------------------- */
enum dd_log_level { DD_LOG_ERROR = 0, DD_LOG_WARN, DD_LOG_INFO, DD_LOG_DEBUG };
typedef void (*dd_log_fn)(enum dd_log_level lvl, const char *func, const char *msg, void *ud);

extern int dd_log_level; /* the one documented global besides the config; set at start-up */
void dd_log_set(dd_log_fn fn, void *ud);
void dd_log(enum dd_log_level lvl, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_AT(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((int)(lvl) <= dd_log_level)                                                            \
            dd_log((lvl), __func__, __VA_ARGS__);                                                  \
    } while (0)
#define LOG_E(...) LOG_AT(DD_LOG_ERROR, __VA_ARGS__)
#define LOG_W(...) LOG_AT(DD_LOG_WARN, __VA_ARGS__)
#define LOG_I(...) LOG_AT(DD_LOG_INFO, __VA_ARGS__)
#define LOG_D(...) LOG_AT(DD_LOG_DEBUG, __VA_ARGS__)

/* A progress line (no newline: "\r" + the message, rewritten in place; done ends the line) on
 * stderr when it is a terminal and the level shows info lines; nothing otherwise, where the
 * caller logs the result as a line. Returns whether it printed. */
bool dd_progress(bool done, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Is stderr a terminal that dd_progress writes to? */
bool dd_progress_on(void);

/* Monotonic time in seconds. */
double dd_now(void);

#endif
