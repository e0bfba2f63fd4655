/*
 * cfg_impl — what the two files of the cfg module share (STYLE rule 2): the row type of the
 * option table, the table itself, and the value helpers. Only cfg.c and cfg_check.c (and the
 * unit test) include this; everyone else uses cfg.h.
 *
 * cfg.c owns the table and turns text into values (defaults, file, environment, command line);
 * cfg_check.c judges a loaded config (cross-field checks) and shows it (--help, the dump).
 */
#ifndef DELTAD_CFG_IMPL_H
#define DELTAD_CFG_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h" // defines: struct cfg

enum cfg_type { CFG_INT, CFG_FLOAT, CFG_BOOL, CFG_STR, CFG_ENUM };

/* Row flags. */
enum {
    CFG_RESTART = 1u << 0, /* read at start-up only: a change needs a restart */
    CFG_RUNTIME = 1u << 1, /* re-read and applied on SIGHUP */
    CFG_SECRET = 1u << 2,  /* masked in the dump and in messages */
};

/* One option. The default is text in the config-file syntax, parsed like any user value. */
struct cfg_row {
    const char *name;    /* lower case with '_'; DELTAD_<NAME> in the environment */
    enum cfg_type type;  /* INT: int64_t, FLOAT: double, BOOL: bool, STR: char *, ENUM: int */
    const char *def;     /* default in file syntax */
    double min, max;     /* INT/FLOAT: inclusive range; STR: max = longest value in bytes */
    unsigned flags;      /* CFG_RESTART | CFG_RUNTIME | CFG_SECRET */
    size_t off;          /* offsetof into struct cfg */
    const char *choices; /* ENUM: "a|b|c", stored as the index */
    const char *help;    /* one line for --help and HINT lines */
};

/* The option table, [cfg__n_rows], in the order of the example file and the dump. */
extern const struct cfg_row cfg__rows[];
extern const int cfg__n_rows;

/* Row index of key (dashes count as underscores), or -1. */
int cfg__row_find(const char *key);
/* Integer with an optional K/M/G (binary) suffix. Returns 0 or -1. */
int cfg__parse_i64(const char *s, int64_t *out);
/* Row r's value in c as text ("\"str\"", "true", "8080", the enum's choice); secrets become
 * "(set, hidden)" when mask is true. Returns buf. */
const char *cfg__fmt_value(const struct cfg *c, const struct cfg_row *r, bool mask, char *buf,
                           size_t cap);
/* Append a line to c->warnings (dropped when full). */
void cfg__add_warning(struct cfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
