/*
 * cfg_impl — what the two files of the cfg module share (STYLE rule 2): the row type of the
 * option table itself and the value helpers (the row type is public, in cfg.h, because the
 * subcommands' option table in server/cli/cmd.c is made of the same rows). Only cfg.c and
 * cfg_check.c (and the unit test) include this; everyone else uses cfg.h.
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
