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

#include "engine/compute/device.h" // defines: struct dev
#include "engine/compute/fwd.h"    // defines: struct fwd_ctx
#include "engine/compute/topo.h"   // defines: topo_t
#include "engine/model/model.h"    // defines: struct model

/* Which subcommand a flag belongs to (bit mask). */
enum { CMD_GENERATE = 1, CMD_LOGITS = 2, CMD_BENCH = 4, CMD_INFO = 8 };

struct cmd_opts {
    const char *model;
    const char *prompt;
    const char *tokens; /* "1,2,3" */
    const char *out;
    int64_t n_predict;
    double temp, top_p;
    int64_t top_k;
    int64_t seed;
    int64_t threads; /* 0 = all allowed cores */
    int64_t tp;      /* CPU devices (tensor parallel) */
    int64_t batch;   /* max tokens per forward call */
    int64_t ctx;     /* 0 = what the command needs */
    bool mtp;
    bool no_bind;
    int64_t n_prompt, n_gen, reps, depth; /* bench */
    const char *isa;                      /* force scalar | avx2 | avx512 */
    const char *spec;                     /* bench: speculation types to compare */
    const char *text;                     /* bench --spec: prompt text */
    int64_t draft_max;
    const char *rollback; /* bench --spec: snapshot | recompute | both (NULL = snapshot) */
    double p_min;         /* bench --spec: MTP draft confidence floor */
};

/* Parse argv[first..argc) for subcommand `which`. Returns 0, or prints the error + usage and
 * returns 2. */
int cmd_parse(int argc, char **argv, int first, int which, struct cmd_opts *o);
void cmd_usage(const char *prog, int which);

/* Model + device + forward context for one command. */
struct cmd_engine {
    struct dev *devs[64];
    int n_dev;
    struct dev *dev; /* devs[0] */
    struct model *model;
    struct fwd_ctx *fwd;
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
int cmd_info(const struct cmd_opts *o);

#endif
