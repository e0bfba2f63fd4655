/*
 * cfg — the daemon's configuration: one table of options (STYLE rule 27) that drives the config
 * file parser, the DELTAD_<KEY> environment overrides, the --key value command line, the
 * `deltad serve --help` text, validation, the cross-field checks and the effective-config dump.
 *
 * Precedence: built-in default < config file (--config FILE) < environment < command line.
 *
 * Errors are one message naming where the bad value came from and the key, then a HINT line:
 *   "/etc/deltad/deltad.conf:12: key 'port': expected an integer in [1, 65535], got 'http'\n"
 *   "HINT: ..."
 *
 * Ownership: strings in struct cfg are owned by it (cfg_free). The process-wide config (STYLE
 * rule 26) is written through cfg_mut() during start-up only; after cfg_freeze() it is read
 * through cfg_get() and never changes. Threads: cfg_mut/cfg_freeze on the main thread before
 * any other thread reads the config; cfg_get from any thread afterwards.
 */
#ifndef DELTAD_CFG_H
#define DELTAD_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/compute/device.h" // defines: struct dev_spec

/* Upper bound on the number of table rows (the table has fewer; a static assert checks). */
#define CFG_MAX_KEYS 64

/* Where a key's value came from. */
enum cfg_src { CFG_SRC_DEFAULT = 0, CFG_SRC_FILE, CFG_SRC_ENV, CFG_SRC_CLI };

/* log_format values (the order of the enum row's choices). */
enum cfg_log_format { CFG_LOG_AUTO = 0, CFG_LOG_PLAIN, CFG_LOG_SYSLOG };
/* reasoning_format values (the order of the enum row's choices; enum api_reasoning). */
enum cfg_reasoning { CFG_REASONING_SEPARATE = 0, CFG_REASONING_NONE };
/* spec_type values (the order of the enum row's choices). */
enum cfg_spec_type { CFG_SPEC_NONE = 0, CFG_SPEC_NGRAM, CFG_SPEC_MTP, CFG_SPEC_BOTH };
/* spec_rollback values (the order of the enum row's choices; ENG_ROLLBACK_*). */
enum cfg_spec_rollback { CFG_ROLLBACK_SNAPSHOT = 0, CFG_ROLLBACK_RECOMPUTE };

struct cfg {
    /* ---- listener and HTTP limits ---- */
    char *host;
    int64_t port;
    int64_t http_threads;
    int64_t max_conns;
    int64_t idle_timeout;   /* seconds */
    double receive_timeout; /* seconds for a request to arrive complete */
    int64_t max_body;       /* bytes */
    int64_t max_json_depth;
    char *cors_origin; /* "" = no CORS headers */
    /* ---- authentication ---- */
    char *api_key;      /* "" = none; after cfg_check also holds the key read from api_key_file */
    char *api_key_file; /* "" = none */
    bool auth_metrics;
    /* ---- model, devices, engine ---- */
    char *model;
    char *model_name; /* after cfg_check: never "" (the model file's base name by default) */
    char *devices;    /* "cpu:N" */
    int64_t threads;  /* per CPU device, 0 = one per allowed core */
    bool bind_threads;
    double mpi_timeout; /* seconds, under mpirun */
    bool cuda_graphs;   /* decode / verification steps replayed as CUDA graphs */
    int64_t slots;
    int64_t ctx; /* positions per slot */
    int64_t max_batch_tokens;
    int64_t checkpoints;
    int64_t checkpoint_every; /* tokens */
    int64_t cache_mem_max;    /* bytes, 0 = MemAvailable at start-up */
    int64_t cache_ram_max;    /* bytes of saved prompt prefixes in RAM, 0 = none */
    char *cache_dir;          /* directory of saved prompt prefixes, "" = none */
    int64_t cache_disk_max;   /* bytes of cache_dir's files, 0 = no limit */
    /* ---- speculative decoding ---- */
    int spec_type;          /* enum cfg_spec_type */
    int64_t spec_draft_max; /* snapshot depth = the longest MTP draft */
    int64_t spec_ngram_n, spec_ngram_min, spec_ngram_max;
    double spec_p_min;
    int spec_rollback; /* enum cfg_spec_rollback */
    /* ---- requests and admission ---- */
    int64_t queue_max;
    int64_t queue_full_status;   /* 429 or 503 */
    int64_t retry_after;         /* seconds, Retry-After on a full queue */
    double request_timeout;      /* seconds, 0 = none */
    int64_t responses_store_max; /* stored /v1/responses objects, 0 = none */
    double responses_store_ttl;  /* seconds */
    int64_t max_tokens_default;
    double drain_timeout; /* seconds */
    /* ---- chat ---- */
    char *chat_template_file; /* "" = the model's tokenizer.chat_template */
    int reasoning_format;     /* enum cfg_reasoning */
    /* ---- endpoints ---- */
    bool metrics;
    bool slots_endpoint;
    /* ---- logging ---- */
    int log_level;  /* enum dd_log_level */
    int log_format; /* enum cfg_log_format */
    char *log_file; /* "" = stderr */

    /* ---- derived by cfg_check ---- */
    struct dev_spec dev_spec; /* devices, parsed (dev_spec_parse) */

    /* ---- bookkeeping ---- */
    char *config_path;               /* --config FILE, or NULL */
    unsigned char src[CFG_MAX_KEYS]; /* enum cfg_src per table row */
    int line[CFG_MAX_KEYS];          /* config-file line per row (0 = not in the file) */
    char warnings[1024];             /* non-fatal notes for the start-up log, '\n'-separated */
};

/* ---- the row type: one option of a table (STYLE rule 27) ----
 * The daemon's table is in cfg.c; the offline subcommands build theirs from the same rows
 * (server/cli/cmd.c), so parsing, range checks, defaults and --help come from one place. */
enum cfg_type { CFG_INT, CFG_FLOAT, CFG_BOOL, CFG_STR, CFG_ENUM };

/* Row flags. */
enum {
    CFG_RESTART = 1u << 0, /* read at start-up only: a change needs a restart */
    CFG_RUNTIME = 1u << 1, /* re-read and applied on SIGHUP */
    CFG_SECRET = 1u << 2,  /* masked in the dump and in messages */
    CFG_TEXT = 1u << 3,    /* STR: free text, control characters allowed (a prompt) */
};

/* One option. The default is text in the config-file syntax, parsed like any user value. */
struct cfg_row {
    const char *name;    /* lower case with '_'; DELTAD_<NAME> in the environment */
    enum cfg_type type;  /* INT: int64_t, FLOAT: double, BOOL: bool, STR: char *, ENUM: int */
    const char *def;     /* default in file syntax */
    double min, max;     /* INT/FLOAT: inclusive range; STR: max = longest value in bytes */
    unsigned flags;      /* CFG_RESTART | CFG_RUNTIME | CFG_SECRET | CFG_TEXT */
    size_t off;          /* offsetof into the struct the table fills (struct cfg here) */
    const char *choices; /* ENUM: "a|b|c", stored as the index */
    const char *help;    /* one line for --help and HINT lines */
};

/* The daemon's row for key (dashes count as underscores), or NULL. */
const struct cfg_row *cfg_row_find(const char *key);
/* Parse and range-check val into the field at base + r->off (a STR field owns a malloc'd copy
 * and frees the one it replaces). Returns 0, or -1 with the reason in msg; a failed parse
 * changes nothing. */
int cfg_row_set(const struct cfg_row *r, void *base, const char *val, char *msg, size_t cap);
/* The --help entry of row r, shown as flag ("--spec-type", or "-b, --batch") in a column of
 * width characters: the flag, the type and range, the default from r->def, then the help line. */
void cfg_row_help(FILE *f, const struct cfg_row *r, const char *flag, int width);
/* "--" + r->name with dashes for underscores, into buf. Returns buf. */
const char *cfg_row_flag(const struct cfg_row *r, char *buf, size_t cap);

/* Fill c with the built-in defaults. Release with cfg_free. */
void cfg_init(struct cfg *c);
void cfg_free(struct cfg *c);

/* The whole sequence: defaults, the file named by --config, DELTAD_* environment, the command
 * line args[0..n) (the arguments after "serve"), then cfg_check. Returns 0, 1 when --help was
 * given (the help text is printed to out), or a negative dd_err with the message in err. */
int cfg_load(struct cfg *c, int n, char **args, FILE *out, char *err, size_t errlen);

/* The steps of cfg_load, for tests. Each returns 0 or a negative dd_err with err written. */
int cfg_load_file(struct cfg *c, const char *path, char *err, size_t errlen);
int cfg_load_env(struct cfg *c, char *err, size_t errlen);
int cfg_load_args(struct cfg *c, int n, char **args, char *err, size_t errlen);
/* Set one key from text; where names the source in the message ("FILE:LINE", ...). */
int cfg_set(struct cfg *c, const char *key, const char *val, enum cfg_src src, const char *where,
            char *err, size_t errlen);
/* Cross-field checks and derived values (reads api_key_file). */
int cfg_check(struct cfg *c, char *err, size_t errlen);

/* Where key's value came from, for messages: "FILE:LINE", "environment DELTAD_KEY",
 * "command line --key" or "built-in default". Returns buf. */
const char *cfg_where(const struct cfg *c, const char *key, char *buf, size_t cap);

/* `deltad serve --help`, generated from the table. */
void cfg_print_help(FILE *f);
/* The effective configuration, one LOG_I line per key with its source; secrets masked. Also
 * logs the warnings gathered while loading. */
void cfg_dump(const struct cfg *c);
/* Compare a freshly loaded config with the running one: logs every changed key, and whether it
 * applies now (RUNTIME) or at the next restart. Returns the number of changed keys. */
int cfg_report_changes(const struct cfg *running, const struct cfg *fresh);

/* The process-wide config (STYLE rule 26): mutable until cfg_freeze, const afterwards. */
struct cfg *cfg_mut(void);
void cfg_freeze(void);
const struct cfg *cfg_get(void);

#endif
