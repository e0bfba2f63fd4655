/*
 * cfg — the option table and the sources that fill a struct cfg from it: built-in defaults,
 * the config file, the DELTAD_* environment and the command line (see cfg.h). The checks and
 * views of a loaded config live in cfg_check.c; both files share cfg_impl.h.
 *
 * Every row holds its default as text in the config-file syntax, so the defaults go through the
 * same parser and validation as user values, and the example file can be checked against the
 * table word for word. A row's min/max bound integers and floats; for strings max is the
 * longest accepted value in bytes.
 *
 * Invariants: after cfg_init every field holds a valid value; cfg_set either stores a valid
 * value and records its source, or leaves the field untouched and explains why in err.
 * Threads: see cfg.h; nothing here locks.
 */
#include "cfg.h" // defines: struct cfg, cfg_load

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cfg_impl.h"    // defines: struct cfg_row, cfg__rows
#include "engine/util.h" // defines: xstrdup, dd_errf

#define OFF(f) offsetof(struct cfg, f)
#define R CFG_RESTART
/* The option table: one row per key, in the order of the example file and the dump. Adding a
 * key means a field in struct cfg, a row here, and a paragraph in config/deltad.conf.example
 * (test_cfg fails until the example lists it with the same default). */
const struct cfg_row cfg__rows[] = {
    /* ---- listener and HTTP limits (read by the HTTP layer) ---- */
    {"host", CFG_STR, "127.0.0.1", 0, 255, R, OFF(host), NULL,
     "address to listen on (IP literal or name; 0.0.0.0 or :: for every interface)"},
    {"port", CFG_INT, "8080", 0, 65535, R, OFF(port), NULL,
     "TCP port to listen on (0 = any free port, named in the start-up log)"},
    {"http_threads", CFG_INT, "4", 1, 256, R, OFF(http_threads), NULL,
     "HTTP worker threads (they never run the model)"},
    {"max_conns", CFG_INT, "256", 1, 65536, R, OFF(max_conns), NULL,
     "open connections at most; more are refused"},
    {"idle_timeout", CFG_INT, "30", 1, 3600, R, OFF(idle_timeout), NULL,
     "seconds a connection may stay silent before it is closed"},
    {"receive_timeout", CFG_FLOAT, "10", 0.5, 3600, R, OFF(receive_timeout), NULL,
     "seconds a request may take to arrive complete, headers and body (a new connection's "
     "from its accept); slower ones are closed"},
    {"max_body", CFG_INT, "8M", 1024, 1 << 30, R, OFF(max_body), NULL,
     "largest request body in bytes (K/M/G suffixes); larger ones get 413"},
    {"max_json_depth", CFG_INT, "64", 1, 1000, R, OFF(max_json_depth), NULL,
     "deepest JSON nesting accepted in a request"},
    {"cors_origin", CFG_STR, "", 0, 255, R, OFF(cors_origin), NULL,
     "Access-Control-Allow-Origin value (\"\" = no CORS, \"*\" or http(s)://host)"},
    /* ---- authentication ---- */
    {"api_key", CFG_STR, "", 0, 4096, R | CFG_SECRET, OFF(api_key), NULL,
     "bearer key every API request must carry (\"\" = no authentication)"},
    {"api_key_file", CFG_STR, "", 0, 4096, R, OFF(api_key_file), NULL,
     "file whose first line is the API key (exclusive with api_key)"},
    {"auth_metrics", CFG_BOOL, "true", 0, 0, R, OFF(auth_metrics), NULL,
     "with a key set, /metrics needs the key too"},
    /* ---- model, devices, engine (become struct eng_params) ---- */
    {"model", CFG_STR, "models/demo.gguf", 0, 4096, R, OFF(model), NULL,
     "GGUF model file to serve"},
    {"model_name", CFG_STR, "", 0, 255, R, OFF(model_name), NULL,
     "model id in the API (\"\" = the file name without .gguf)"},
    {"devices", CFG_STR, "cpu:1", 0, 255, R, OFF(devices), NULL,
     "compute devices: cpu:N = N CPU devices over disjoint core sets; cuda:0, cuda:0,1 or "
     "cuda:all = those GPUs (a CUDA build); several devices run tensor parallel"},
    {"threads", CFG_INT, "0", 0, 1024, R, OFF(threads), NULL,
     "threads per CPU device (0 = one per allowed core)"},
    {"bind_threads", CFG_BOOL, "true", 0, 0, R, OFF(bind_threads), NULL,
     "bind the engine and device threads to cores with hwloc"},
    {"mpi_timeout", CFG_FLOAT, "30", 1, 3600, R, OFF(mpi_timeout), NULL,
     "under mpirun: seconds a rank waits for another within a step before the job counts "
     "as broken (rank 0 then fails its requests with 503 and exits 1)"},
    {"cuda_graphs", CFG_BOOL, "on", 0, 0, R, OFF(cuda_graphs), NULL,
     "replay decode and verification steps on GPUs as CUDA graphs, one per batch shape (off: "
     "launch every kernel each step, to measure the difference)"},
    {"slots", CFG_INT, "4", 1, 1024, R, OFF(slots), NULL,
     "requests decoded concurrently (each slot holds ctx positions)"},
    {"ctx", CFG_INT, "4096", 16, 1 << 24, R, OFF(ctx), NULL,
     "context positions per slot (prompt + completion)"},
    {"max_batch_tokens", CFG_INT, "512", 1, 65536, R, OFF(max_batch_tokens), NULL,
     "tokens per forward step (prefill chunks + decode tokens)"},
    {"checkpoints", CFG_INT, "4", 0, 64, R, OFF(checkpoints), NULL,
     "prompt-cache state checkpoints per slot (hybrid GDN models)"},
    {"checkpoint_every", CFG_INT, "512", 16, 1 << 20, R, OFF(checkpoint_every), NULL,
     "minimum spacing of prompt-cache checkpoints, tokens"},
    {"cache_mem_max", CFG_INT, "0", 0, 1LL << 50, R, OFF(cache_mem_max), NULL,
     "bytes the caches, snapshots and checkpoints may take (K/M/G; 0 = the available memory)"},
    {"cache_ram_max", CFG_INT, "2G", 0, 1LL << 50, R, OFF(cache_ram_max), NULL,
     "bytes of saved prompt prefixes (KV rows + state) kept in RAM when slots drop them, least "
     "recently used dropped first (K/M/G; 0 = none)"},
    {"cache_dir", CFG_STR, "", 0, 4096, R, OFF(cache_dir), NULL,
     "directory where saved prompt prefixes are also written, read back after a restart "
     "(\"\" = none)"},
    {"cache_disk_max", CFG_INT, "0", 0, 1LL << 50, R, OFF(cache_disk_max), NULL,
     "bytes of saved prompt prefixes kept in cache_dir, least recently used (file mtime) "
     "deleted first (K/M/G; 0 = no limit)"},
    /* ---- speculative decoding (lossless; a per-slot throttle drafts only where it pays) ---- */
    {"spec_type", CFG_ENUM, "ngram,mtp", 0, 0, R, OFF(spec_type), "none|ngram|mtp|ngram,mtp",
     "draft sources: n-gram lookup in the request's own text, the model's MTP head, or both"},
    {"spec_draft_max", CFG_INT, "3", 1, 16, R, OFF(spec_draft_max), NULL,
     "longest MTP draft; also the GDN snapshot depth kept per slot for rollback"},
    {"spec_ngram_n", CFG_INT, "3", 1, 16, R, OFF(spec_ngram_n), NULL,
     "longest n-gram matched against the history"},
    {"spec_ngram_min", CFG_INT, "2", 1, 16, R, OFF(spec_ngram_min), NULL,
     "shortest n-gram accepted as a match"},
    {"spec_ngram_max", CFG_INT, "8", 1, 64, R, OFF(spec_ngram_max), NULL,
     "longest n-gram draft; beyond spec_draft_max a state checkpoint covers the rollback"},
    {"spec_p_min", CFG_FLOAT, "0.05", 0, 1, R, OFF(spec_p_min), NULL,
     "stop an MTP draft at a token the head gives a lower probability than this"},
    {"spec_rollback", CFG_ENUM, "snapshot", 0, 0, R, OFF(spec_rollback), "snapshot|recompute",
     "DEBUG: undo rejected drafts by state snapshots, or by restoring a checkpoint and re-running"},
    /* ---- admission and request limits ---- */
    {"queue_max", CFG_INT, "64", 0, 65536, R, OFF(queue_max), NULL,
     "requests waiting for a slot at most; more get queue_full_status"},
    {"queue_full_status", CFG_INT, "503", 429, 503, R, OFF(queue_full_status), NULL,
     "HTTP status for a full queue: 429 or 503"},
    {"retry_after", CFG_INT, "1", 0, 3600, R, OFF(retry_after), NULL,
     "Retry-After seconds sent with a full-queue or draining answer"},
    {"request_timeout", CFG_FLOAT, "600", 0, 86400, R, OFF(request_timeout), NULL,
     "seconds a request may run in total (0 = no limit)"},
    {"max_tokens_default", CFG_INT, "0", 0, 1 << 24, R, OFF(max_tokens_default), NULL,
     "max_tokens when a request gives none (0 = until end or the context is full)"},
    {"drain_timeout", CFG_FLOAT, "30", 0, 3600, R, OFF(drain_timeout), NULL,
     "seconds SIGTERM waits for running requests before cancelling them"},
    {"responses_store_max", CFG_INT, "1000", 0, 1000000, R, OFF(responses_store_max), NULL,
     "/v1/responses kept in memory for GET and previous_response_id (0 = none; oldest "
     "evicted first)"},
    {"responses_store_ttl", CFG_FLOAT, "3600", 1, 2592000, R, OFF(responses_store_ttl), NULL,
     "seconds a stored /v1/responses object is kept"},
    /* ---- chat templates and output parsing ---- */
    {"chat_template_file", CFG_STR, "", 0, 4096, R, OFF(chat_template_file), NULL,
     "Jinja chat template to use instead of the model's (\"\" = the GGUF's, else ChatML)"},
    {"reasoning_format", CFG_ENUM, "separate", 0, 0, R, OFF(reasoning_format), "separate|none",
     "separate: <think> blocks go to reasoning_content; none: left in the content"},
    /* ---- endpoints and logging ---- */
    {"metrics", CFG_BOOL, "true", 0, 0, R, OFF(metrics), NULL, "serve Prometheus /metrics"},
    {"slots_endpoint", CFG_BOOL, "true", 0, 0, R, OFF(slots_endpoint), NULL,
     "serve /slots (per-slot state)"},
    {"log_level", CFG_ENUM, "info", 0, 0, CFG_RUNTIME, OFF(log_level), "error|warn|info|debug",
     "least severe level logged"},
    {"log_format", CFG_ENUM, "auto", 0, 0, R, OFF(log_format), "auto|plain|syslog",
     "plain: timestamped lines; syslog: <N> priority prefixes for journald; auto: syslog "
     "under journald"},
    {"log_file", CFG_STR, "", 0, 4096, R, OFF(log_file), NULL,
     "append the log to this file, reopened on SIGHUP (\"\" = stderr)"},
};
#undef R
#undef OFF

#define N_ROWS ((int)(sizeof cfg__rows / sizeof cfg__rows[0]))
_Static_assert(sizeof cfg__rows / sizeof cfg__rows[0] <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS");
const int cfg__n_rows = N_ROWS;

/* ============================================================================================
 * Rows and values
 * ========================================================================================== */

/* A linear scan: the table has a few dozen rows and lookups happen only while loading. */
int cfg__row_find(const char *key)
{
    for (int i = 0; i < N_ROWS; i++) {
        const char *a = cfg__rows[i].name, *b = key;
        while (*a && (*a == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b)
            return i;
    }
    return -1;
}

const struct cfg_row *cfg_row_find(const char *key)
{
    int i = cfg__row_find(key);
    return i < 0 ? NULL : &cfg__rows[i];
}

int cfg__parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s)
        return -1;
    long long mul = 1; /* K/M/G are powers of 1024, as in max_body = 8M */
    if (*end && strchr("kKmMgG", *end)) {
        mul = tolower((unsigned char)*end) == 'k'   ? 1LL << 10
              : tolower((unsigned char)*end) == 'm' ? 1LL << 20
                                                    : 1LL << 30;
        end++;
    }
    if (*end || v > INT64_MAX / mul || v < -(INT64_MAX / mul))
        return -1;
    *out = v * mul;
    return 0;
}

/* The usual spellings of a boolean, any case. Returns 0 or -1. */
static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out = strcasecmp(s, yes[i]) == 0;
            return 0;
        }
    }
    return -1;
}

/* Index of s among "a|b|c", or -1. */
static int parse_choice(const char *choices, const char *s)
{
    size_t n = strlen(s);
    int idx = 0;
    for (const char *p = choices; *p; idx++) {
        size_t len = strcspn(p, "|");
        if (len == n && strncasecmp(p, s, n) == 0)
            return idx;
        p += len + (p[len] == '|');
    }
    return -1;
}

/* Copy choice idx of "a|b|c" into buf. */
static const char *choice_name(const char *choices, int idx, char *buf, size_t cap)
{
    const char *p = choices;
    for (int i = 0; i < idx && *p; i++)
        p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
    snprintf(buf, cap, "%.*s", (int)strcspn(p, "|"), p);
    return buf;
}

/* Store a copy of val. Control characters are refused: every string ends up in log lines or
 * HTTP headers, where a newline would forge a line or a header. */
static int set_string(void *base, const struct cfg_row *r, const char *val, char *msg, size_t cap)
{
    if (strlen(val) > (size_t)r->max) {
        dd_errf(msg, cap, "longer than %.0f bytes", r->max);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)val; *p && !(r->flags & CFG_TEXT); p++) {
        if (*p < 0x20 || *p == 0x7f) {
            dd_errf(msg, cap, "contains a control character");
            return -1;
        }
    }
    char **dst = (char **)((char *)base + r->off);
    free(*dst);
    *dst = xstrdup(val); /* owned by the struct at base */
    return 0;
}

/* The message quotes the value unless the row is secret. */
int cfg_row_set(const struct cfg_row *r, void *base, const char *val, char *msg, size_t cap)
{
    void *dst = (char *)base + r->off;
    const char *shown = (r->flags & CFG_SECRET) ? "(hidden)" : val;
    int64_t i;
    double d;
    char *end;
    /* The value is stored only after it passed every check: a failed set changes nothing. */
    switch (r->type) {
    case CFG_INT:
        if (cfg__parse_i64(val, &i) || i < r->min || i > r->max)
            goto bad_int;
        *(int64_t *)dst = i;
        return 0;
    case CFG_FLOAT: /* the negated range test also refuses NaN */
        errno = 0;
        d = strtod(val, &end);
        if (errno || end == val || *end || !(d >= r->min && d <= r->max))
            goto bad_float;
        *(double *)dst = d;
        return 0;
    case CFG_BOOL:
        if (parse_bool(val, (bool *)dst) == 0)
            return 0;
        dd_errf(msg, cap, "expected true or false (or yes/no, on/off, 1/0), got '%s'", shown);
        return -1;
    case CFG_ENUM:
        if ((i = parse_choice(r->choices, val)) >= 0) {
            *(int *)dst = (int)i;
            return 0;
        }
        dd_errf(msg, cap, "expected one of %s, got '%s'", r->choices, shown);
        return -1;
    case CFG_STR:
        return set_string(base, r, val, msg, cap);
    }
    return -1;
bad_int:
    dd_errf(msg, cap, "expected an integer in [%.0f, %.0f], got '%s'", r->min, r->max, shown);
    return -1;
bad_float:
    dd_errf(msg, cap, "expected a number in [%g, %g], got '%s'", r->min, r->max, shown);
    return -1;
}

/* Strings are quoted so an empty value stays visible in the dump ("" rather than nothing). */
const char *cfg__fmt_value(const struct cfg *c, const struct cfg_row *r, bool mask, char *buf,
                           size_t cap)
{
    const void *src = (const char *)c + r->off;
    switch (r->type) {
    case CFG_INT:
        snprintf(buf, cap, "%lld", (long long)*(const int64_t *)src);
        break;
    case CFG_FLOAT:
        snprintf(buf, cap, "%g", *(const double *)src);
        break;
    case CFG_BOOL:
        snprintf(buf, cap, "%s", *(const bool *)src ? "true" : "false");
        break;
    case CFG_ENUM:
        choice_name(r->choices, *(const int *)src, buf, cap);
        break;
    case CFG_STR: {
        const char *s = *(char *const *)src;
        if (mask && (r->flags & CFG_SECRET) && s && *s)
            snprintf(buf, cap, "(set, hidden)");
        else
            snprintf(buf, cap, "\"%s\"", s ? s : "");
        break;
    }
    }
    return buf;
}

/* ============================================================================================
 * Messages
 * ========================================================================================== */

/* Levenshtein distance of two short strings (two rows of the classic table), 99 when either
 * is too long to be a key. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

/* "unknown key", suggesting the nearest key within two edits ("prot" -> "port"). */
static int fail_unknown(const char *where, const char *key, char *err, size_t errlen)
{
    int best = -1, best_d = 3;
    for (int i = 0; i < N_ROWS; i++) {
        int d = edit_distance(cfg__rows[i].name, key);
        if (d < best_d)
            best = i, best_d = d;
    }
    if (best >= 0)
        dd_errf(err, errlen,
                "%s: key '%s': unknown key\nHINT: did you mean '%s'? "
                "(`deltad serve --help` lists every key)",
                where, key, cfg__rows[best].name);
    else
        dd_errf(err, errlen,
                "%s: key '%s': unknown key\nHINT: `deltad serve --help` lists "
                "every key",
                where, key);
    return DD_EINVAL;
}

/* A bad value for row r: the HINT repeats the row's help and default, so the message alone
 * says what the key is for. */
static int fail_row(const char *where, const struct cfg_row *r, const char *msg, char *err,
                    size_t errlen)
{
    dd_errf(err, errlen, "%s: key '%s': %s\nHINT: %s: %s (default %s%s%s)", where, r->name, msg,
            r->name, r->help, r->type == CFG_STR ? "\"" : "", r->def,
            r->type == CFG_STR ? "\"" : "");
    return DD_EINVAL;
}

/* Warnings wait in the config until cfg_dump: logging is not set up while the config loads
 * (the log settings are part of it). */
void cfg__add_warning(struct cfg *c, const char *fmt, ...)
{
    size_t len = strlen(c->warnings);
    if (len + 2 >= sizeof c->warnings)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->warnings + len, sizeof c->warnings - len - 1, fmt, ap);
    va_end(ap);
    strcat(c->warnings, "\n");
}

/* ============================================================================================
 * Life cycle and setting one key
 * ========================================================================================== */

/* The defaults go through cfg_row_set like any other text; a default that does not parse is a
 * bug in the table, caught by the first start (and by test_cfg). */
void cfg_init(struct cfg *c)
{
    char msg[256];
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_ROWS; i++)
        ASSERT(cfg_row_set(&cfg__rows[i], c, cfg__rows[i].def, msg, sizeof msg) == 0);
}

/* Free every string field (found through the table, so a new string key needs no code here). */
void cfg_free(struct cfg *c)
{
    for (int i = 0; i < N_ROWS; i++) {
        if (cfg__rows[i].type == CFG_STR)
            free(*(char **)((char *)c + cfg__rows[i].off));
    }
    free(c->config_path);
    memset(c, 0, sizeof *c);
}

/* Every source ends here: file lines, environment variables and command-line arguments. */
int cfg_set(struct cfg *c, const char *key, const char *val, enum cfg_src src, const char *where,
            char *err, size_t errlen)
{
    int i = cfg__row_find(key);
    if (i < 0)
        return fail_unknown(where, key, err, errlen);
    char msg[512];
    if (cfg_row_set(&cfg__rows[i], c, val, msg, sizeof msg))
        return fail_row(where, &cfg__rows[i], msg, err, errlen);
    c->src[i] = (unsigned char)src;
    return 0;
}

/* ============================================================================================
 * Config file: "key = value" lines, '#' comments, "double" (with \" \\ \n \t) or 'single'
 * (literal) quotes. Every key may appear once.
 * ========================================================================================== */

/* Parse the value at s (leading blanks skipped) into out. Returns NULL on success or a message
 * explaining the syntax error. */
static const char *parse_value(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    if (*s == '"' || *s == '\'') {
        char q = *s++; /* '"' understands escapes, '\'' takes everything literally */
        for (; *s && *s != q; s++) {
            char ch = *s;
            if (q == '"' && ch == '\\') {
                ch = *++s;
                if (ch == 'n' || ch == 't')
                    ch = ch == 'n' ? '\n' : '\t';
                else if (ch != '"' && ch != '\\')
                    return "unknown escape in a quoted value (use \\\" \\\\ \\n \\t)";
            }
            if (n + 1 < cap)
                out[n++] = ch;
        }
        if (*s != q)
            return "unterminated quoted value";
        s += 1 + strspn(s + 1, " \t\r\n");
        if (*s && *s != '#')
            return "text after the closing quote";
    } else { /* unquoted: up to a comment or the line end, trailing blanks dropped */
        size_t len = strcspn(s, "#\r\n");
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
            len--;
        n = len < cap - 1 ? len : cap - 1;
        memcpy(out, s, n);
    }
    out[n] = '\0';
    return NULL;
}

/* One line of the file: blank, a comment, or "key = value" with an optional comment. The key
 * may use dashes like the command line; a key set twice is an error rather than "last wins",
 * because a forgotten duplicate is how edits silently stop working. */
static int parse_line(struct cfg *c, const char *path, int ln, char *s, char *err, size_t errlen)
{
    char where[4200], key[64], val[4200];
    snprintf(where, sizeof where, "%s:%d", path, ln);
    s += strspn(s, " \t\r\n");
    if (!*s || *s == '#')
        return 0;
    size_t klen = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    const char *eq = s + klen + strspn(s + klen, " \t");
    if (klen == 0 || klen >= sizeof key || *eq != '=') {
        dd_errf(err, errlen,
                "%s: expected 'key = value', got '%.40s'\nHINT: each line is "
                "'key = value'; '#' starts a comment; quote values that contain '#'",
                where, s);
        return DD_EINVAL;
    }
    memcpy(key, s, klen);
    key[klen] = '\0';
    const char *msg = parse_value(eq + 1 + strspn(eq + 1, " \t"), val, sizeof val);
    if (msg) {
        dd_errf(err, errlen, "%s: key '%s': %s\nHINT: quote with \"...\" or '...'", where, key,
                msg);
        return DD_EINVAL;
    }
    int i = cfg__row_find(key);
    if (i >= 0 && c->line[i]) {
        dd_errf(err, errlen,
                "%s: key '%s': set twice (first on line %d)\nHINT: keep one of the "
                "two lines",
                where, key, c->line[i]);
        return DD_EINVAL;
    }
    int rc = cfg_set(c, key, val, CFG_SRC_FILE, where, err, errlen);
    if (rc == 0)
        c->line[i] = ln;
    return rc;
}

/* Line by line with fgets: a line longer than the buffer is an error, not two lines. */
int cfg_load_file(struct cfg *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        dd_errf(err, errlen,
                "%s: cannot open the config file: %s\nHINT: pass an existing file "
                "to --config (config/deltad.conf.example documents every key)",
                path, strerror(errno));
        return DD_EIO;
    }
    free(c->config_path);
    c->config_path = xstrdup(path);
    char line[8192];
    int ln = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        ln++;
        if (!strchr(line, '\n') && !feof(f)) {
            dd_errf(err, errlen,
                    "%s:%d: line longer than %zu bytes\nHINT: values are short; "
                    "is this a config file?",
                    path, ln, sizeof line - 2);
            rc = DD_EINVAL;
            break;
        }
        rc = parse_line(c, path, ln, line, err, errlen);
    }
    if (rc == 0 && ferror(f)) {
        dd_errf(err, errlen, "%s: read error\nHINT: check the file system", path);
        rc = DD_EIO;
    }
    fclose(f);
    return rc;
}

/* ============================================================================================
 * Environment and command line
 * ========================================================================================== */

extern char **environ;

/* Walk the environment rather than getenv() each key, so a misspelt DELTAD_ variable becomes a
 * warning in the start-up log instead of being silently ignored. */
int cfg_load_env(struct cfg *c, char *err, size_t errlen)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "DELTAD_", 7) != 0 || !strchr(*e, '='))
            continue;
        char key[64], where[96];
        size_t klen = (size_t)(strchr(*e, '=') - (*e + 7));
        if (klen >= sizeof key)
            continue;
        for (size_t j = 0; j < klen; j++)
            key[j] = (char)tolower((unsigned char)(*e)[7 + j]);
        key[klen] = '\0';
        if (cfg__row_find(key) < 0) { /* DELTAD_TEST_BUILD and friends land here too */
            cfg__add_warning(c, "environment %.*s is not a config key; ignored", (int)klen + 7, *e);
            continue;
        }
        snprintf(where, sizeof where, "environment %.*s", (int)klen + 7, *e);
        int rc = cfg_set(c, key, *e + 8 + klen, CFG_SRC_ENV, where, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* One "--key value" / "--key=value" / "--flag" argument at args[*i]; advances *i past the
 * value it consumed. A boolean key alone (followed by another --key or nothing) means true. */
static int load_arg(struct cfg *c, int n, char **args, int *i, char *err, size_t errlen)
{
    const char *a = args[*i], *eq = strchr(a, '=');
    size_t klen = strncmp(a, "--", 2) == 0 ? (eq ? (size_t)(eq - a) : strlen(a)) - 2 : 0;
    char key[64], where[96];
    if (klen == 0 || klen >= sizeof key) {
        dd_errf(err, errlen,
                "command line: unexpected argument '%.60s'\nHINT: options are "
                "--key value or --key=value; `deltad serve --help` lists the keys",
                a);
        return DD_EINVAL;
    }
    snprintf(key, sizeof key, "%.*s", (int)klen, a + 2);
    snprintf(where, sizeof where, "command line --%s", key);
    if (strcmp(key, "config") == 0) { /* read by cfg_load before anything else */
        *i += !eq;
        return 0;
    }
    int r = cfg__row_find(key);
    if (r < 0)
        return fail_unknown(where, key, err, errlen);
    const char *val = eq ? eq + 1 : NULL;
    bool next_is_key = *i + 1 >= n || strncmp(args[*i + 1], "--", 2) == 0;
    if (!val && cfg__rows[r].type == CFG_BOOL && next_is_key)
        val = "true";
    if (!val && *i + 1 >= n) {
        dd_errf(err, errlen, "%s: key '%s': needs a value\nHINT: --%s VALUE or --%s=VALUE", where,
                cfg__rows[r].name, key, key);
        return DD_EINVAL;
    }
    if (!val)
        val = args[++*i];
    return cfg_set(c, key, val, CFG_SRC_CLI, where, err, errlen);
}

int cfg_load_args(struct cfg *c, int n, char **args, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        int rc = load_arg(c, n, args, &i, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* --help and --config are looked for first: the file must be applied before the environment
 * and the other arguments, whatever the argument order. */
int cfg_load(struct cfg *c, int n, char **args, FILE *out, char *err, size_t errlen)
{
    const char *path = NULL;
    cfg_init(c);
    for (int i = 0; i < n; i++) {
        if (strcmp(args[i], "--help") == 0 || strcmp(args[i], "-h") == 0) {
            cfg_print_help(out);
            return 1;
        }
        if (strncmp(args[i], "--config=", 9) == 0)
            path = args[i] + 9;
        else if (strcmp(args[i], "--config") == 0 && i + 1 < n)
            path = args[++i];
        else if (strcmp(args[i], "--config") == 0) {
            dd_errf(err, errlen, "command line --config: needs a file\nHINT: --config FILE");
            return DD_EINVAL;
        }
    }
    int rc = path ? cfg_load_file(c, path, err, errlen) : 0;
    if (rc == 0)
        rc = cfg_load_env(c, err, errlen);
    if (rc == 0)
        rc = cfg_load_args(c, n, args, err, errlen);
    if (rc == 0)
        rc = cfg_check(c, err, errlen);
    return rc;
}

/* ============================================================================================
 * The process-wide config (STYLE rule 26)
 * ========================================================================================== */

/* The one mutable global (STYLE rule 26). No lock: it is written by the main thread before any
 * other thread starts, and only read afterwards; cfg_mut / cfg_get assert that order. */
static struct cfg g_cfg;
static bool g_frozen; /* set once by cfg_freeze */

struct cfg *cfg_mut(void)
{
    ASSERT(!g_frozen);
    return &g_cfg;
}

void cfg_freeze(void)
{
    g_frozen = true;
}

const struct cfg *cfg_get(void)
{
    ASSERT(g_frozen);
    return &g_cfg;
}
