/*
 * cfg_check — the second half of the cfg module (see cfg.h, cfg_impl.h): the cross-field checks
 * that run after every source was applied, the values they derive (the API key read from
 * api_key_file, model_name, the device count), and the views of a config: `--help`, the
 * effective-config dump and the SIGHUP change report.
 *
 * Invariant: messages never show the value of a CFG_SECRET row.
 * Threads: main thread only, like the rest of cfg.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cfg.h"                   // defines: struct cfg, cfg_check
#include "cfg_impl.h"              // defines: cfg__rows, cfg__fmt_value
#include "engine/compute/device.h" // defines: dev_spec_parse
#include "engine/util.h"           // defines: dd_errf, LOG_I, xstrdup

/* ============================================================================================
 * Where a value came from
 * ========================================================================================== */

/* Where row i's current value came from. Cross-field messages name the source of the key they
 * blame, so "max_batch_tokens is less than slots" points at the line to edit. */
static const char *where_of(const struct cfg *c, int i, char *buf, size_t cap)
{
    char env[80];
    switch (c->src[i]) {
    case CFG_SRC_FILE:
        snprintf(buf, cap, "%s:%d", c->config_path ? c->config_path : "?", c->line[i]);
        break;
    case CFG_SRC_ENV:
        snprintf(env, sizeof env, "DELTAD_%s", cfg__rows[i].name);
        for (char *p = env; *p; p++)
            *p = (char)toupper((unsigned char)*p);
        snprintf(buf, cap, "environment %s", env);
        break;
    case CFG_SRC_CLI:
        snprintf(buf, cap, "command line --%s", cfg__rows[i].name);
        break;
    default:
        snprintf(buf, cap, "built-in default");
    }
    return buf;
}

/* For serve.c's start-up errors about a key's value (a model that does not load, a port that
 * is taken). */
const char *cfg_where(const struct cfg *c, const char *key, char *buf, size_t cap)
{
    int i = cfg__row_find(key);
    ASSERT(i >= 0);
    return where_of(c, i, buf, cap);
}

/* A cross-field failure about key: "WHERE: key 'k': msg\nHINT: hint". */
static int fail_check(const struct cfg *c, const char *key, const char *hint, char *err,
                      size_t errlen, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int fail_check(const struct cfg *c, const char *key, const char *hint, char *err,
                      size_t errlen, const char *fmt, ...)
{
    char msg[512], where[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int i = cfg__row_find(key);
    ASSERT(i >= 0);
    dd_errf(err, errlen, "%s: key '%s': %s\nHINT: %s", where_of(c, i, where, sizeof where), key,
            msg, hint);
    return DD_EINVAL;
}

/* ============================================================================================
 * Cross-field checks and derived values
 * ========================================================================================== */

/* Read the first line of path into *key (transferred). Returns NULL or a message. Only the
 * first line counts, so a trailing newline or a comment line after the key does no harm; the
 * mode is reported so a key file readable by everyone gets a warning. */
static const char *read_key_file(const char *path, char **key, bool *world_readable)
{
    struct stat st;
    FILE *f = fopen(path, "r");
    if (!f)
        return strerror(errno);
    *world_readable = fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH);
    char line[4200];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!got)
        return "the file is empty";
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0])
        return "the first line is empty";
    *key = xstrdup(line);
    return NULL;
}

/* devices = cpu:N | cuda:I[,J...] | cuda:all (dev_spec_parse; GPUs are looked for when the
 * devices are created). */
static int check_devices(struct cfg *c, char *err, size_t errlen)
{
    char msg[256];
    if (dev_spec_parse(c->devices, &c->dev_spec, msg, sizeof msg))
        return fail_check(c, "devices",
                          "devices = cpu:N (N from 1 to 64), or cuda:0, cuda:0,1, cuda:all in a "
                          "CUDA build",
                          err, errlen, "%s", msg);
    return 0;
}

/* api_key vs api_key_file, reading the file into api_key (so the HTTP layer sees one key), and
 * the warnings an operator should see: a world-readable key file, a public listener without a
 * key. The key itself never appears in a message. */
static int check_auth(struct cfg *c, char *err, size_t errlen)
{
    if (*c->api_key && *c->api_key_file)
        return fail_check(c, "api_key_file", "set only one of api_key and api_key_file", err,
                          errlen, "api_key is set as well");
    if (*c->api_key_file) {
        char *key = NULL;
        bool open_to_all = false;
        const char *msg = read_key_file(c->api_key_file, &key, &open_to_all);
        if (msg)
            return fail_check(c, "api_key_file", "the file's first line is the key", err, errlen,
                              "%s: %s", c->api_key_file, msg);
        if (open_to_all)
            cfg__add_warning(c, "api_key_file %s is readable by every user; chmod 600 it",
                             c->api_key_file);
        free(c->api_key);
        c->api_key = key;
    }
    for (const unsigned char *p = (const unsigned char *)c->api_key; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f)
            return fail_check(c, *c->api_key_file ? "api_key_file" : "api_key",
                              "keys are printable ASCII without spaces", err, errlen,
                              "the key contains a space or a non-ASCII byte");
    }
    bool loopback = strncmp(c->host, "127.", 4) == 0 || strcmp(c->host, "::1") == 0 ||
                    strcmp(c->host, "localhost") == 0;
    if (!*c->api_key && !loopback)
        cfg__add_warning(c,
                         "listening on %s without an api_key: whoever reaches the port can "
                         "use the model",
                         c->host);
    return 0;
}

/* model_name defaults to the model file's base name without ".gguf", which is what clients
 * put in "model" when they follow /v1/models. */
static void derive_model_name(struct cfg *c)
{
    if (*c->model_name)
        return;
    const char *base = strrchr(c->model, '/') ? strrchr(c->model, '/') + 1 : c->model;
    size_t len = strlen(base);
    if (len > 5 && strcmp(base + len - 5, ".gguf") == 0)
        len -= 5;
    free(c->model_name);
    c->model_name = xmalloc(len + 1);
    memcpy(c->model_name, base, len);
    c->model_name[len] = '\0';
}

/* The checks that involve more than one key or more than a range, in the order a reader of
 * the config file would meet them; the first failure is reported. */
int cfg_check(struct cfg *c, char *err, size_t errlen)
{
    if (!*c->host)
        return fail_check(c, "host", "e.g. host = 127.0.0.1", err, errlen, "must not be empty");
    if (!*c->model)
        return fail_check(c, "model", "model = /path/to/model.gguf", err, errlen,
                          "must not be empty");
    if (c->model[strlen(c->model) - 1] == '/') /* no base name to derive model_name from */
        return fail_check(c, "model", "model = /path/to/model.gguf", err, errlen,
                          "'%s' names a directory, not a GGUF file", c->model);
    if (c->queue_full_status != 429 && c->queue_full_status != 503)
        return fail_check(c, "queue_full_status", "use 429 (Too Many Requests) or 503", err, errlen,
                          "expected 429 or 503, got %lld", (long long)c->queue_full_status);
    if (c->max_batch_tokens < c->slots)
        return fail_check(c, "max_batch_tokens",
                          "each slot needs a token per step: raise "
                          "max_batch_tokens or lower slots",
                          err, errlen, "%lld is less than slots (%lld)",
                          (long long)c->max_batch_tokens, (long long)c->slots);
    if (c->max_tokens_default > c->ctx)
        return fail_check(c, "max_tokens_default",
                          "it must fit the context: lower it or raise "
                          "ctx",
                          err, errlen, "%lld exceeds ctx (%lld)", (long long)c->max_tokens_default,
                          (long long)c->ctx);
    if (*c->cors_origin && strcmp(c->cors_origin, "*") != 0 &&
        strncmp(c->cors_origin, "http://", 7) != 0 && strncmp(c->cors_origin, "https://", 8) != 0)
        return fail_check(c, "cors_origin", "one origin such as https://app.example.com, or *", err,
                          errlen, "expected \"*\" or an http(s):// origin, got '%s'",
                          c->cors_origin);
    if (c->spec_ngram_min > c->spec_ngram_n)
        return fail_check(c, "spec_ngram_min", "it must not exceed spec_ngram_n", err, errlen,
                          "%lld exceeds spec_ngram_n (%lld)", (long long)c->spec_ngram_min,
                          (long long)c->spec_ngram_n);
    if (c->spec_type != CFG_SPEC_NONE && c->max_batch_tokens < c->slots * (1 + c->spec_draft_max))
        LOG_W("max_batch_tokens %lld < slots x (1 + spec_draft_max): some steps will verify "
              "fewer drafts",
              (long long)c->max_batch_tokens);
    int rc = check_devices(c, err, errlen);
    if (rc == 0)
        rc = check_auth(c, err, errlen);
    if (rc == 0)
        derive_model_name(c);
    return rc;
}

/* ============================================================================================
 * Help, dump, changes
 * ========================================================================================== */

/* The type column of --help: the range for numbers, the choices for enums. */
static const char *type_text(const struct cfg_row *r, char *buf, size_t cap)
{
    switch (r->type) {
    case CFG_INT:
        snprintf(buf, cap, "int %.0f..%.0f", r->min, r->max);
        break;
    case CFG_FLOAT:
        snprintf(buf, cap, "number %g..%g", r->min, r->max);
        break;
    case CFG_BOOL:
        snprintf(buf, cap, "bool");
        break;
    case CFG_ENUM:
        snprintf(buf, cap, "%s", r->choices);
        break;
    case CFG_STR:
        snprintf(buf, cap, "string");
        break;
    }
    return buf;
}

const char *cfg_row_flag(const struct cfg_row *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "--%s", r->name);
    for (char *p = buf; *p; p++)
        *p = *p == '_' ? '-' : *p;
    return buf;
}

/* Two lines per key: flag, type and default; then the help text. */
void cfg_row_help(FILE *f, const struct cfg_row *r, const char *flag, int width)
{
    char type[96];
    const char *q = r->type == CFG_STR ? "\"" : "";
    fprintf(f, "  %-*s %-24s default %s%s%s%s\n      %s\n", width, flag,
            type_text(r, type, sizeof type), q, r->def, q,
            (r->flags & CFG_RUNTIME) ? "  [runtime]" : "", r->help);
}

/* Keys are shown with dashes, the command-line spelling; underscores are accepted too. */
void cfg_print_help(FILE *f)
{
    fprintf(f, "usage: deltad serve [--config FILE] [--KEY VALUE | --KEY=VALUE]...\n\n"
               "Serve the model over HTTP (OpenAI API). Every key below can be set in the "
               "config file\nas 'key = value', in the environment as DELTAD_KEY, or on the "
               "command line as --key VALUE\n(dashes and underscores are interchangeable). "
               "Precedence: default < file < environment\n< command line. Keys marked "
               "[runtime] are re-read on SIGHUP; the others need a restart.\n\n");
    for (int i = 0; i < cfg__n_rows; i++) {
        char flag[80];
        cfg_row_help(f, &cfg__rows[i], cfg_row_flag(&cfg__rows[i], flag, sizeof flag), 22);
    }
}

/* One line per key so the journal can be grepped for a key; the source is shown only when it
 * is not the default, to keep overrides easy to spot. */
void cfg_dump(const struct cfg *c)
{
    char val[4200], where[4200];
    LOG_I("config file: %s", c->config_path ? c->config_path : "(none)");
    for (int i = 0; i < cfg__n_rows; i++) {
        cfg__fmt_value(c, &cfg__rows[i], true, val, sizeof val);
        if (c->src[i] == CFG_SRC_DEFAULT)
            LOG_I("config %-18s = %s", cfg__rows[i].name, val);
        else
            LOG_I("config %-18s = %s (%s)", cfg__rows[i].name, val,
                  where_of(c, i, where, sizeof where));
    }
    for (const char *p = c->warnings; *p; p += strcspn(p, "\n") + 1)
        LOG_W("config: %.*s", (int)strcspn(p, "\n"), p);
}

/* Values are compared as text (unmasked), which covers every type with one comparison. */
int cfg_report_changes(const struct cfg *running, const struct cfg *fresh)
{
    int n = 0;
    char a[4200], b[4200];
    for (int i = 0; i < cfg__n_rows; i++) {
        const struct cfg_row *r = &cfg__rows[i];
        if (strcmp(cfg__fmt_value(running, r, false, a, sizeof a),
                   cfg__fmt_value(fresh, r, false, b, sizeof b)) == 0)
            continue;
        n++;
        cfg__fmt_value(fresh, r, true, b, sizeof b);
        if (r->flags & CFG_RUNTIME)
            LOG_I("config %s changed to %s (applied)", r->name, b);
        else
            LOG_W("config %s changed to %s; restart deltad to apply it", r->name, b);
    }
    return n;
}
