/*
 * test_cfg — the option table of server/config/cfg.c:
 *   - every default is valid, names are unique, and every row carries help;
 *   - values of every type parse (suffixes, bool words, enums, quotes) and every bad value is
 *     refused with a message naming the key and a HINT line;
 *   - the config file syntax (comments, quotes, escapes) and its errors carry FILE:LINE;
 *   - precedence default < file < environment < command line, and the --key forms;
 *   - cross-field checks (max_batch_tokens vs slots, api_key vs api_key_file, devices, ...);
 *   - config/deltad.conf.example lists every key with its default, and --help every key;
 *   - the effective-config dump masks the API key.
 * Run from the repository root (tests/run.sh does).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"
#include "server/config/cfg.h"
#include "server/config/cfg_impl.h"
#include "test.h"

static char tmpdir[] = "/tmp/test_cfg.XXXXXX";

/* Write text to a fresh file under tmpdir; returns its path (static buffer per call site). */
static const char *write_file(const char *name, const char *text)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

/* Clear every DELTAD_* variable so the caller's environment cannot leak into a test. */
static void clear_env(void)
{
    for (int i = 0; i < cfg__n_rows; i++) {
        char name[80];
        size_t n = (size_t)snprintf(name, sizeof name, "DELTAD_%s", cfg__rows[i].name);
        for (size_t j = 7; j < n; j++)
            name[j] = (char)toupper((unsigned char)name[j]);
        unsetenv(name);
    }
}

TEST(defaults_valid)
{
    struct cfg c;
    char err[1024];
    cfg_init(&c);
    CHECK_STR_EQ(c.host, "127.0.0.1");
    CHECK_EQ(c.port, 8080);
    CHECK_EQ(c.max_body, 8 << 20);
    CHECK_EQ(c.log_level, DD_LOG_INFO);
    CHECK(c.auth_metrics);
    CHECK_EQ(cfg_check(&c, err, sizeof err), 0);
    CHECK_STR_EQ(c.model_name, "demo");
    CHECK_EQ(c.dev_spec.n, 1);
    CHECK(!c.dev_spec.cuda);
    for (int i = 0; i < cfg__n_rows; i++) {
        CHECK(cfg__rows[i].help && *cfg__rows[i].help);
        CHECK_EQ(c.src[i], CFG_SRC_DEFAULT);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(cfg__rows[i].name, cfg__rows[j].name) != 0);
        for (const char *s = cfg__rows[i].name; *s; s++)
            CHECK((*s >= 'a' && *s <= 'z') || *s == '_');
    }
    cfg_free(&c);
}

TEST(values_parse)
{
    struct cfg c;
    char err[1024];
    cfg_init(&c);
    CHECK_EQ(cfg_set(&c, "max_body", "2M", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_EQ(c.max_body, 2 << 20);
    CHECK_EQ(cfg_set(&c, "ctx", "32k", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_EQ(c.ctx, 32768);
    CHECK_EQ(cfg_set(&c, "drain_timeout", "2.5", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_NEAR(c.drain_timeout, 2.5, 0);
    CHECK_EQ(cfg_set(&c, "metrics", "off", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK(!c.metrics);
    CHECK_EQ(cfg_set(&c, "metrics", "YES", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK(c.metrics);
    CHECK_EQ(cfg_set(&c, "log_level", "DEBUG", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_EQ(c.log_level, DD_LOG_DEBUG);
    CHECK_EQ(cfg_set(&c, "log-format", "syslog", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_EQ(c.log_format, CFG_LOG_SYSLOG);
    CHECK_EQ(cfg_set(&c, "host", "::1", CFG_SRC_CLI, "t", err, sizeof err), 0);
    CHECK_STR_EQ(c.host, "::1");
    CHECK_EQ(c.src[cfg__row_find("host")], CFG_SRC_CLI);
    cfg_free(&c);
}

/* A value of the wrong kind for row r. */
static const char *bad_value(const struct cfg_row *r, char *buf, size_t cap)
{
    switch (r->type) {
    case CFG_INT:
        snprintf(buf, cap, "%.0f", r->max + 1);
        return buf;
    case CFG_FLOAT:
        return "-1";
    case CFG_BOOL:
        return "maybe";
    case CFG_ENUM:
        return "nonsense";
    case CFG_STR:
        memset(buf, 'x', cap - 1);
        buf[cap - 1] = '\0';
        return buf;
    }
    return "";
}

TEST(every_bad_value_names_key)
{
    static char big[8192];
    for (int i = 0; i < cfg__n_rows; i++) {
        struct cfg c;
        char err[1024], needle[96];
        cfg_init(&c);
        size_t cap = cfg__rows[i].type == CFG_STR ? (size_t)cfg__rows[i].max + 2 : sizeof big;
        const char *v = bad_value(&cfg__rows[i], big, cap);
        CHECK_EQ(cfg_set(&c, cfg__rows[i].name, v, CFG_SRC_FILE, "f.conf:3", err, sizeof err),
                 DD_EINVAL);
        snprintf(needle, sizeof needle, "f.conf:3: key '%s': ", cfg__rows[i].name);
        CHECK(strstr(err, needle) == err);
        CHECK(strstr(err, "\nHINT: ") != NULL);
        if (!strstr(err, needle))
            printf("  %s\n", err);
        cfg_free(&c);
    }
    struct cfg c;
    char err[1024];
    cfg_init(&c);
    CHECK_EQ(cfg_set(&c, "port", "80x", CFG_SRC_FILE, "w", err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "expected an integer in [0, 65535], got '80x'") != NULL);
    CHECK_EQ(cfg_set(&c, "port", "", CFG_SRC_FILE, "w", err, sizeof err), DD_EINVAL);
    CHECK_EQ(cfg_set(&c, "api_key", "a\x01", CFG_SRC_FILE, "w", err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "\x01") == NULL);
    CHECK_EQ(cfg_set(&c, "prot", "1", CFG_SRC_FILE, "w", err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "key 'prot': unknown key") && strstr(err, "did you mean 'port'"));
    CHECK_EQ(c.port, 8080); /* failed sets change nothing */
    cfg_free(&c);
}

TEST(file_syntax)
{
    struct cfg c;
    char err[1024];
    const char *p = write_file("ok.conf", "# comment\n\n  port = 9000   # trailing comment\n"
                                          "host=\"::1\"\n"
                                          "api_key = \"a#b\\\"c\"  # quoted\n"
                                          "cors_origin = 'https://x.example # literal'\n"
                                          "max-body = 1M\r\n");
    cfg_init(&c);
    CHECK_EQ(cfg_load_file(&c, p, err, sizeof err), 0);
    CHECK_EQ(c.port, 9000);
    CHECK_STR_EQ(c.host, "::1");
    CHECK_STR_EQ(c.api_key, "a#b\"c");
    CHECK_STR_EQ(c.cors_origin, "https://x.example # literal");
    CHECK_EQ(c.max_body, 1 << 20);
    CHECK_EQ(c.line[cfg__row_find("port")], 3);
    CHECK_EQ(c.src[cfg__row_find("max_body")], CFG_SRC_FILE);
    cfg_free(&c);
}

/* Load text as a file; the error must start with FILE:LINE and contain needle. */
static void file_error(const char *text, int line, const char *needle)
{
    struct cfg c;
    char err[1024], where[600];
    const char *p = write_file("bad.conf", text);
    cfg_init(&c);
    int rc = cfg_load_file(&c, p, err, sizeof err);
    snprintf(where, sizeof where, "%s:%d: ", p, line);
    CHECK(rc != 0);
    CHECK(rc != 0 && strncmp(err, where, strlen(where)) == 0 && strstr(err, needle) &&
          strstr(err, "\nHINT: "));
    if (rc == 0 || !strstr(err, needle))
        printf("  got: %s\n", rc ? err : "(accepted)");
    cfg_free(&c);
}

TEST(file_errors)
{
    file_error("port = 1\nbogus_key = 3\n", 2, "key 'bogus_key': unknown key");
    file_error("\n\nport = 70000\n", 3, "key 'port': expected an integer in [0, 65535]");
    file_error("port = 1\nport = 2\n", 2, "key 'port': set twice (first on line 1)");
    file_error("port 8080\n", 1, "expected 'key = value'");
    file_error("host = \"abc\n", 1, "key 'host': unterminated quoted value");
    file_error("host = \"abc\" x\n", 1, "text after the closing quote");
    file_error("host = \"a\\qb\"\n", 1, "unknown escape");
    file_error("metrics = perhaps\n", 1, "key 'metrics': expected true or false");
    file_error("log_level = loud\n", 1, "key 'log_level': expected one of error|warn|info|debug");
    struct cfg c;
    char err[1024];
    cfg_init(&c);
    CHECK_EQ(cfg_load_file(&c, "/nonexistent/deltad.conf", err, sizeof err), DD_EIO);
    CHECK(strstr(err, "/nonexistent/deltad.conf: cannot open") && strstr(err, "HINT: "));
    cfg_free(&c);
}

TEST(precedence)
{
    struct cfg c;
    char err[1024];
    const char *p = write_file("prec.conf", "port = 1001\nslots = 2\nmax_batch_tokens = 64\n");
    char conf[600];
    snprintf(conf, sizeof conf, "--config=%s", p);
    clear_env();
    char *a1[] = {conf};
    CHECK_EQ(cfg_load(&c, 1, a1, stdout, err, sizeof err), 0);
    CHECK_EQ(c.port, 1001);
    CHECK_EQ(c.slots, 2);
    CHECK_EQ(c.ctx, 4096); /* untouched: default */
    cfg_free(&c);
    setenv("DELTAD_PORT", "1002", 1);
    CHECK_EQ(cfg_load(&c, 1, a1, stdout, err, sizeof err), 0);
    CHECK_EQ(c.port, 1002);
    CHECK_EQ(c.src[cfg__row_find("port")], CFG_SRC_ENV);
    CHECK_EQ(c.src[cfg__row_find("slots")], CFG_SRC_FILE);
    cfg_free(&c);
    char *a2[] = {"--port", "1003", "--config", (char *)p};
    CHECK_EQ(cfg_load(&c, 4, a2, stdout, err, sizeof err), 0);
    CHECK_EQ(c.port, 1003);
    CHECK_EQ(c.src[cfg__row_find("port")], CFG_SRC_CLI);
    CHECK_STR_EQ(cfg_where(&c, "port", err, sizeof err), "command line --port");
    cfg_free(&c);
    setenv("DELTAD_PORT", "abc", 1);
    CHECK_EQ(cfg_load(&c, 1, a1, stdout, err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "environment DELTAD_PORT: key 'port': ") == err);
    cfg_free(&c);
    unsetenv("DELTAD_PORT");
    setenv("DELTAD_PROT", "1", 1);
    CHECK_EQ(cfg_load(&c, 1, a1, stdout, err, sizeof err), 0);
    CHECK(strstr(c.warnings, "DELTAD_PROT is not a config key") != NULL);
    cfg_free(&c);
    unsetenv("DELTAD_PROT");
}

TEST(command_line_forms)
{
    struct cfg c;
    char err[1024];
    clear_env();
    char *a[] = {"--port=1234", "--max-body",     "64K",         "--metrics", "--slots_endpoint",
                 "false",       "--bind-threads", "--log-level", "warn"};
    CHECK_EQ(cfg_load(&c, 9, a, stdout, err, sizeof err), 0);
    CHECK_EQ(c.port, 1234);
    CHECK_EQ(c.max_body, 65536);
    CHECK(c.metrics && !c.slots_endpoint && c.bind_threads);
    CHECK_EQ(c.log_level, DD_LOG_WARN);
    cfg_free(&c);
    char *b[] = {"--port"};
    CHECK_EQ(cfg_load(&c, 1, b, stdout, err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "command line --port: key 'port': needs a value") == err);
    cfg_free(&c);
    char *d[] = {"port=3"};
    CHECK_EQ(cfg_load(&c, 1, d, stdout, err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "unexpected argument 'port=3'") != NULL);
    cfg_free(&c);
    char *e[] = {"--slotz", "3"};
    CHECK_EQ(cfg_load(&c, 2, e, stdout, err, sizeof err), DD_EINVAL);
    CHECK(strstr(err, "key 'slotz': unknown key") && strstr(err, "did you mean 'slots'"));
    cfg_free(&c);
    char *f[] = {"--config"};
    CHECK_EQ(cfg_load(&c, 1, f, stdout, err, sizeof err), DD_EINVAL);
    cfg_free(&c);
}

/* cfg_load with args; expect failure whose message contains needle. */
static void check_fails(int n, char **args, const char *needle)
{
    struct cfg c;
    char err[1024];
    int rc = cfg_load(&c, n, args, stdout, err, sizeof err);
    CHECK(rc != 0 && strstr(err, needle) && strstr(err, "\nHINT: "));
    if (rc == 0 || !strstr(err, needle))
        printf("  want '%s', got: %s\n", needle, rc ? err : "(accepted)");
    cfg_free(&c);
}

TEST(cross_checks)
{
    clear_env();
    char *a[] = {"--slots", "8", "--max_batch_tokens", "4"};
    check_fails(4, a,
                "command line --max_batch_tokens: key 'max_batch_tokens': 4 is less than "
                "slots (8)");
    char *b[] = {"--devices", "cpu:65"};
    check_fails(2, b, "key 'devices': expected cpu:N");
    char *b1[] = {"--spec_ngram_n", "2", "--spec_ngram_min", "3"};
    check_fails(4, b1, "key 'spec_ngram_min': 3 exceeds spec_ngram_n (2)");
    char *b2[] = {"--devices", "cuda:0"};
    { /* syntax only here: a build without CUDA refuses cuda specs at start-up (serve.c) */
        struct cfg c;
        char err[1024];
        CHECK_EQ(cfg_load(&c, 2, b2, stdout, err, sizeof err), 0);
        CHECK(c.dev_spec.cuda && c.dev_spec.n == 1 && c.dev_spec.gpu[0] == 0);
        cfg_free(&c);
        char *b7[] = {"--devices", "cuda:all"};
        CHECK_EQ(cfg_load(&c, 2, b7, stdout, err, sizeof err), 0);
        CHECK(c.dev_spec.cuda && c.dev_spec.all);
        cfg_free(&c);
        char *b4[] = {"--devices", "cuda:0,2,0"};
        check_fails(2, b4, "'cuda:0,2,0' names GPU 0 twice");
        char *b5[] = {"--devices", "cuda:1,"};
        check_fails(2, b5, "expected cuda:all or cuda: and up to 64 distinct GPU ordinals");
    }
    char *b3[] = {"--devices", "gpu"};
    check_fails(2, b3, "key 'devices': expected cpu:N");
    char *b6[] = {"--devices", "cpu:0"};
    check_fails(2, b6, "expected cpu:N with N from 1 to 64");
    char *d[] = {"--queue_full_status", "450"};
    check_fails(2, d, "key 'queue_full_status': expected 429 or 503");
    char *e[] = {"--ctx", "64", "--max_tokens_default", "100"};
    check_fails(4, e, "key 'max_tokens_default': 100 exceeds ctx (64)");
    char *f[] = {"--ctx", "8"};
    check_fails(2, f, "key 'ctx': expected an integer in [16,");
    char *g[] = {"--cors_origin", "example.com"};
    check_fails(2, g, "key 'cors_origin'");
    char *h[] = {"--model", ""};
    check_fails(2, h, "key 'model': must not be empty");
    const char *kf = write_file("key", "s3cret-key\nignored\n");
    chmod(kf, 0644);
    char *i[] = {"--api_key", "x", "--api_key_file", (char *)kf};
    check_fails(4, i, "key 'api_key_file': api_key is set as well");
    char *j[] = {"--api_key_file", "/nonexistent/key"};
    check_fails(2, j, "key 'api_key_file': /nonexistent/key: ");
    char *k[] = {"--api_key", "has space"};
    check_fails(2, k, "key 'api_key': the key contains a space");

    struct cfg c;
    char err[1024];
    char *ok[] = {"--api_key_file", (char *)kf, "--model", "/m/Qwen3-8B.gguf", "--host", "0.0.0.0"};
    CHECK_EQ(cfg_load(&c, 6, ok, stdout, err, sizeof err), 0);
    CHECK_STR_EQ(c.api_key, "s3cret-key");
    CHECK_STR_EQ(c.model_name, "Qwen3-8B");
    CHECK(strstr(c.warnings, "readable by every user") != NULL);
    cfg_free(&c);
    char *nokey[] = {"--host", "0.0.0.0"};
    CHECK_EQ(cfg_load(&c, 2, nokey, stdout, err, sizeof err), 0);
    CHECK(strstr(c.warnings, "without an api_key") != NULL);
    cfg_free(&c);
}

TEST(example_lists_every_key)
{
    struct cfg ex, def;
    char err[1024], a[4200], b[4200];
    cfg_init(&def);
    cfg_init(&ex);
    int rc = cfg_load_file(&ex, "config/deltad.conf.example", err, sizeof err);
    CHECK_EQ(rc, 0);
    if (rc)
        printf("  %s\n", err);
    for (int i = 0; i < cfg__n_rows && rc == 0; i++) {
        if (!ex.line[i])
            printf("  config/deltad.conf.example lacks key '%s'\n", cfg__rows[i].name);
        CHECK(ex.line[i] > 0);
        cfg__fmt_value(&ex, &cfg__rows[i], false, a, sizeof a);
        cfg__fmt_value(&def, &cfg__rows[i], false, b, sizeof b);
        if (strcmp(a, b) != 0)
            printf("  example sets %s = %s, the default is %s\n", cfg__rows[i].name, a, b);
        CHECK_STR_EQ(a, b);
    }
    cfg_free(&ex);
    cfg_free(&def);
}

TEST(help_lists_every_key)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_print_help(f);
    fclose(f);
    CHECK(strstr(buf, "usage: deltad serve") == buf);
    for (int i = 0; i < cfg__n_rows; i++) {
        char needle[96], flag[80];
        /* shown with dashes, the command-line spelling */
        snprintf(needle, sizeof needle, "  %s ", cfg_row_flag(&cfg__rows[i], flag, sizeof flag));
        CHECK(strchr(needle, '_') == NULL);
        CHECK(strstr(buf, needle) != NULL);
        CHECK(strstr(buf, cfg__rows[i].help) != NULL);
    }
    free(buf);
    struct cfg c;
    char err[64];
    char *h[] = {"--port", "1", "--help"};
    f = fopen("/dev/null", "w");
    CHECK_EQ(cfg_load(&c, 3, h, f, err, sizeof err), 1);
    fclose(f);
    cfg_free(&c);
}

static char dump_buf[65536];

static void capture(enum dd_log_level lvl, const char *func, const char *msg, void *ud)
{
    size_t len = strlen(dump_buf);
    snprintf(dump_buf + len, sizeof dump_buf - len, "%s\n", msg);
}

TEST(dump_masks_secret)
{
    struct cfg c, d;
    char err[1024];
    clear_env();
    char *a[] = {"--api_key", "topsecret123", "--port", "9999"};
    CHECK_EQ(cfg_load(&c, 4, a, stdout, err, sizeof err), 0);
    dump_buf[0] = '\0';
    dd_log_set(capture, NULL);
    cfg_dump(&c);
    CHECK(strstr(dump_buf, "topsecret123") == NULL);
    CHECK(strstr(dump_buf, "(set, hidden)") != NULL);
    CHECK(strstr(dump_buf, "9999 (command line --port)") != NULL);
    for (int i = 0; i < cfg__n_rows; i++)
        CHECK(strstr(dump_buf, cfg__rows[i].name) != NULL);
    char *b[] = {"--api_key", "other-secret", "--port", "9999", "--log_level", "debug"};
    CHECK_EQ(cfg_load(&d, 6, b, stdout, err, sizeof err), 0);
    dump_buf[0] = '\0';
    CHECK_EQ(cfg_report_changes(&c, &d), 2);
    CHECK(strstr(dump_buf, "other-secret") == NULL);
    CHECK(strstr(dump_buf, "log_level changed to debug (applied)") != NULL);
    CHECK(strstr(dump_buf, "api_key changed") && strstr(dump_buf, "restart"));
    dd_log_set(NULL, NULL);
    cfg_free(&c);
    cfg_free(&d);
}

TEST(global_freeze)
{
    struct cfg *m = cfg_mut();
    cfg_init(m);
    m->port = 4321;
    cfg_freeze();
    CHECK_EQ(cfg_get()->port, 4321);
    CHECK(cfg_get() == m);
}

int main(void)
{
    if (!mkdtemp(tmpdir))
        TEST_SKIP("cannot create a temporary directory");
    RUN(defaults_valid);
    RUN(values_parse);
    RUN(every_bad_value_names_key);
    RUN(file_syntax);
    RUN(file_errors);
    RUN(precedence);
    RUN(command_line_forms);
    RUN(cross_checks);
    RUN(example_lists_every_key);
    RUN(help_lists_every_key);
    RUN(dump_masks_secret);
    RUN(global_freeze);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("note: could not remove %s\n", tmpdir);
    TEST_MAIN_END("test_cfg");
}
