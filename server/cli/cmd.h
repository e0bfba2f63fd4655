/*
 * cmd — the offline subcommands of the deltad binary (DESIGN.md section 5): generate, logits,
 * bench, info; plus the option table they share and the engine set-up they share.
 *
 * Every flag is validated (type, range, known for that subcommand); a bad flag prints a usage
 * error naming the flag and exits with status 2. Model problems print the file and the reason
 * and exit with status 1.
 *
 * Thread: the main thread only.
 */
#ifndef DELTAD_CMD_H
#define DELTAD_CMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/compute/device.h" // defines: struct dev
#include "engine/compute/fwd.h"    // defines: struct fwd_ctx
#include "engine/compute/topo.h"   // defines: topo_t
#include "engine/model/model.h"    // defines: struct model

/* Which subcommand a flag belongs to (bit mask). */
enum { CMD_GENERATE = 1, CMD_LOGITS = 2, CMD_BENCH = 4, CMD_INFO = 8 };

#define CMD_MAX_STOP 16 /* --stop strings (ENG_MAX_STOP) */

/* The subcommands' options. Each field is filled through a row of the option table in cmd.c:
 * a row of the daemon's config table (server/config/cfg.c) for the flags that are config keys,
 * or a row of the subcommands' own, so the type follows the row: INT int64_t, FLOAT double,
 * BOOL bool, STR char * (owned, freed by cmd_opts_free), ENUM int (the choice's index). */
struct cmd_opts {
    /* ---- config keys (the daemon's rows and defaults) ---- */
    char *model;              /* model; "" = none given (-m is required but for info) */
    char *devices;            /* devices "cpu:N" or "cuda:..." (--tp N is an alias of cpu:N) */
    struct dev_spec dev_spec; /* devices, parsed by cmd_parse */
    int64_t threads;          /* threads per CPU device, 0 = one per allowed core */
    bool bind;                /* bind_threads; --no-bind clears it */
    bool cuda_graphs;         /* cuda_graphs: GPU decode steps replayed as CUDA graphs */
    int64_t batch;            /* max_batch_tokens: max tokens per forward call */
    int64_t ctx;       /* ctx: context positions at most (the command allocates what it needs) */
    int spec_type;     /* spec_type: enum cfg_spec_type (generate) */
    int64_t draft_max; /* spec_draft_max */
    double p_min;      /* spec_p_min: MTP draft confidence floor */
    /* ---- generate / logits ---- */
    char *prompt; /* "" = none */
    char *tokens; /* "1,2,3"; "" = none */
    char *out;    /* "" = none */
    bool mtp;
    int64_t n_predict;
    double temp, top_p, min_p;
    int64_t top_k;
    double presence_penalty, frequency_penalty, repetition_penalty;
    int64_t seed;
    char *stop[CMD_MAX_STOP]; /* --stop, repeatable; owned */
    int n_stop;
    /* ---- bench ---- */
    int64_t n_prompt, n_gen, reps, depth;
    int spec;       /* --spec: enum cmd_spec */
    char *text;     /* bench --spec: prompt text; "" = a built-in one */
    int rollback;   /* --rollback: enum cmd_rollback */
    char *parallel; /* bench --parallel "1,2,4": batch sizes to decode at; "" = off */
    char *schema;   /* bench --schema FILE: constrained decoding by a JSON Schema; "" = none */
    char *grammar;  /* bench --grammar FILE: by a GBNF grammar; "" = none */
    /* ---- every subcommand ---- */
    int isa;    /* enum cmd_isa */
    int64_t tp; /* --tp N, an alias of --devices cpu:N */
};

/* Choices of the subcommands' enum rows, in the order of the rows' choices. */
enum cmd_spec { CMD_SPEC_NONE = 0, CMD_SPEC_NGRAM, CMD_SPEC_MTP, CMD_SPEC_BOTH, CMD_SPEC_ALL };
enum cmd_rollback { CMD_ROLLBACK_SNAPSHOT = 0, CMD_ROLLBACK_RECOMPUTE, CMD_ROLLBACK_BOTH };
enum cmd_isa { CMD_ISA_AUTO = 0, CMD_ISA_SCALAR, CMD_ISA_AVX2, CMD_ISA_AVX512 };

/* Parse argv[first..argc) for subcommand `which` into *o (defaults first, from the rows).
 * Returns 0; or prints the error naming the flag and returns 2 (release *o either way with
 * cmd_opts_free). --help prints the options to stdout and exits 0. */
int cmd_parse(int argc, char **argv, int first, int which, struct cmd_opts *o);
void cmd_opts_free(struct cmd_opts *o);
/* The options of subcommand `which`, generated from the option table. */
void cmd_usage(FILE *f, const char *prog, int which);

/* Model + device + forward context for one command. */
struct cmd_engine {
    struct dev *devs[64];
    int n_dev;
    struct dev *dev; /* devs[0] */
    struct model *model;
    struct fwd_ctx *fwd;
    bool graphs; /* cuda_graphs (cmd_engine_open) */
};

/* Load the model, discover the topology, create the CPU device. Then cmd_engine_ready builds
 * the forward context for n_seq sequences of n_ctx positions and batches of up to max_tokens.
 * Both print the error and return non-zero on failure (the caller still calls close). */
int cmd_engine_open(struct cmd_engine *e, const struct cmd_opts *o);
int cmd_engine_ready(struct cmd_engine *e, int64_t n_seq, int64_t n_ctx, int64_t max_tokens);
void cmd_engine_close(struct cmd_engine *e);

/* Tokens of -p text (specials parsed, BOS when the model asks) or of --tokens. *out is
 * transferred (free). Returns the count or -1 after printing the error. */
int64_t cmd_prompt_tokens(const struct cmd_engine *e, const struct cmd_opts *o, int32_t **out);

/* Feed tokens [0, n) of sequence 0 from position pos0 in chunks of o->batch; logits are kept
 * for every row when all_logits (rows copied to logits_out [n][n_vocab] when non-NULL, and the
 * hidden rows to hidden_out [n][E] when non-NULL). Returns 0 or prints and returns 1. */
int cmd_feed(struct cmd_engine *e, const int32_t *tok, int64_t n, int64_t pos0, int64_t batch,
             float *logits_out, float *hidden_out);

int cmd_generate(const struct cmd_opts *o);
int cmd_logits(const struct cmd_opts *o);
int cmd_bench(const struct cmd_opts *o);
int cmd_bench_spec(const struct cmd_opts *o);
int cmd_bench_gram(const struct cmd_opts *o); /* bench --schema / --grammar (cmd_gram.c) */
int cmd_info(const struct cmd_opts *o);
/* A worker rank of an mpirun job (cmd_worker.c): which is the subcommand's CMD_* bit, 0 for
 * serve. Returns the exit status. */
int cmd_worker(int argc, char **argv, int which);

#endif
