/*
 * fuzz_cfg — libFuzzer target for the configuration (server/config/cfg.c, cfg_check.c): a config
 * file of fuzzed text through cfg_load_file, or fuzzed command-line words through cfg_load_args,
 * then cfg_check, the effective-config dump and the change report.
 *
 * Input: byte 0 bit 0 = the rest is a config file (0) or command-line words separated by
 * newlines (1); the rest is the text. The file is a memfd read back through /proc/self/fd,
 * so nothing touches the disk.
 *
 * Invariants checked (a violation aborts):
 *   - a rejection is a message and a "HINT:" line (STYLE rule 18b), never a crash;
 *   - an accepted config has every number inside its row's [min, max] and every string within
 *     its row's length limit, and cfg_check either rejects it the same way or derives
 *     model_name and the device count;
 *   - cfg_dump and cfg_report_changes format every value of whatever was accepted.
 * api_key_file is honoured only when it names a regular file (a FIFO or a terminal would block
 * the fuzzer, not the daemon's contract).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"            // defines: dd_log_set, dd_log_level
#include "server/config/cfg.h"      // defines: cfg_init, cfg_load_file, cfg_load_args, cfg_check
#include "server/config/cfg_impl.h" // defines: cfg__rows, cfg__n_rows

static void require(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_cfg: invariant failed: %s\n%s\n", what, detail ? detail : "");
        abort();
    }
}

/* Log lines are formatted (so their code runs) and dropped. */
static void quiet(enum dd_log_level lvl, const char *func, const char *msg, void *ud)
{
    (void)lvl;
    (void)func;
    (void)ud;
    (void)strlen(msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    dd_log_set(quiet, NULL);
    dd_log_level = DD_LOG_DEBUG;
    FILE *devnull = fopen("/dev/null", "w");
    cfg_print_help(devnull);
    fclose(devnull);
    return 0;
}

/* Every row's value within its declared range. */
static void check_ranges(const struct cfg *c)
{
    for (int i = 0; i < cfg__n_rows; i++) {
        const struct cfg_row *r = &cfg__rows[i];
        const char *p = (const char *)c + r->off;
        if (r->type == CFG_INT) {
            int64_t v;
            memcpy(&v, p, sizeof v);
            require((double)v >= r->min && (double)v <= r->max, "int out of range", r->name);
        } else if (r->type == CFG_FLOAT) {
            double v;
            memcpy(&v, p, sizeof v);
            require(v >= r->min && v <= r->max, "float out of range", r->name);
        } else if (r->type == CFG_STR && r->max > 0) {
            char *s;
            memcpy(&s, p, sizeof s);
            require(s && strlen(s) <= (size_t)r->max, "string too long", r->name);
        }
    }
}

/* Split text at newlines into words (NUL-terminated copies in one buffer). */
static int split_words(char *text, size_t len, char **words, int max)
{
    int n = 0;
    char *p = text, *end = text + len;
    while (p < end && n < max) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            nl = end;
        *nl = '\0';
        words[n++] = p;
        p = nl + 1;
    }
    return n;
}

/* Load text as a file (through a memfd) or as words; 0 or the error code. */
static int load(struct cfg *c, const uint8_t *data, size_t size, bool args, char *err,
                size_t errlen)
{
    if (args) {
        char *text = malloc(size + 1);
        memcpy(text, data, size);
        text[size] = '\0';
        char *words[64];
        int n = split_words(text, size, words, 64);
        int rc = cfg_load_args(c, n, words, err, errlen);
        free(text);
        return rc;
    }
    int fd = memfd_create("fuzz.conf", 0);
    require(fd >= 0, "memfd_create", NULL);
    require(write(fd, data, size) == (ssize_t)size, "memfd write", NULL);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = cfg_load_file(c, path, err, errlen);
    close(fd);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    struct cfg c, def;
    char err[4096] = "";
    cfg_init(&c);
    cfg_init(&def);
    int rc = load(&c, data + 1, size - 1, data[0] & 1, err, sizeof err);
    if (rc == 0) {
        struct stat st;
        if (c.api_key_file[0] && (stat(c.api_key_file, &st) != 0 || !S_ISREG(st.st_mode)))
            c.api_key_file[0] = '\0';
        check_ranges(&c);
        rc = cfg_check(&c, err, sizeof err);
    }
    if (rc) {
        require(err[0] != '\0', "rejected without a message", NULL);
        require(strstr(err, "HINT:") != NULL, "rejected without a HINT line", err);
    } else {
        require(c.model_name && c.model_name[0], "no model_name after cfg_check", NULL);
        require(c.dev_spec.n >= 1 || c.dev_spec.all, "no device count after cfg_check", NULL);
        cfg_dump(&c);
        cfg_report_changes(&def, &c);
    }
    cfg_free(&c);
    cfg_free(&def);
    return 0;
}
