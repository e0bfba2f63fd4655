/*
 * cmd — option table and shared engine set-up of the offline subcommands (see cmd.h).
 *
 * The option table drives parsing, validation and the usage text: one row per flag with its
 * type, range, the subcommands that accept it and its help line.
 */
#include "cmd.h" // defines: cmd_parse, cmd_engine_open

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tok.h" // defines: tok_encode
#include "engine/util.h"      // defines: xmalloc
#include "kernels/cpu/kq.h"   // defines: kq_isa_force

enum opt_type { OPT_STR, OPT_INT, OPT_DBL, OPT_FLAG };

struct opt {
    const char *shrt, *lng;
    enum opt_type type;
    size_t off;
    double min, max;
    int which;
    const char *help;
};

#define G CMD_GENERATE
#define L CMD_LOGITS
#define B CMD_BENCH
#define I CMD_INFO
#define OFF(f) offsetof(struct cmd_opts, f)
static const struct opt opts[] = {
    {"-m", "--model", OPT_STR, OFF(model), 0, 0, G | L | B | I, "GGUF model file"},
    {"-p", "--prompt", OPT_STR, OFF(prompt), 0, 0, G | L, "prompt text (special tokens parsed)"},
    {"-p", "--n-prompt", OPT_INT, OFF(n_prompt), 1, 65536, B, "prompt tokens for prefill (512)"},
    {"-n", "--n-predict", OPT_INT, OFF(n_predict), 0, 1 << 20, G, "tokens to generate (64)"},
    {"-n", "--n-gen", OPT_INT, OFF(n_gen), 1, 65536, B, "tokens to decode (64)"},
    {NULL, "--tokens", OPT_STR, OFF(tokens), 0, 0, L, "comma-separated token ids"},
    {"-o", "--output", OPT_STR, OFF(out), 0, 0, L, "output file (float32 rows)"},
    {NULL, "--mtp", OPT_FLAG, OFF(mtp), 0, 0, L, "also write the MTP head's logits"},
    {NULL, "--temp", OPT_DBL, OFF(temp), 0, 100, G, "sampling temperature (0 = greedy)"},
    {NULL, "--top-k", OPT_INT, OFF(top_k), 0, 1 << 30, G, "top-k (0 = off)"},
    {NULL, "--top-p", OPT_DBL, OFF(top_p), 0, 1, G, "top-p (1 = off)"},
    {NULL, "--seed", OPT_INT, OFF(seed), 0, (double)INT64_MAX, G, "RNG seed"},
    {"-t", "--threads", OPT_INT, OFF(threads), 0, 1024, G | L | B | I, "threads (0 = all cores)"},
    {NULL, "--tp", OPT_INT, OFF(tp), 1, 64, G | L | B | I, "CPU devices, tensor parallel (1)"},
    {"-b", "--batch", OPT_INT, OFF(batch), 1, 8192, G | L | B, "max tokens per forward (512)"},
    {"-c", "--ctx", OPT_INT, OFF(ctx), 1, 1 << 24, G | L | I, "context size"},
    {"-r", "--reps", OPT_INT, OFF(reps), 1, 1000, B, "repetitions, median reported (5)"},
    {"-d", "--depth", OPT_INT, OFF(depth), 0, 1 << 20, B, "context depth before decode (0)"},
    {NULL, "--spec", OPT_STR, OFF(spec), 0, 0, B,
     "compare decode with speculation: ngram|mtp|ngram,mtp|all"},
    {NULL, "--text", OPT_STR, OFF(text), 0, 0, B, "prompt text for --spec (special tokens parsed)"},
    {NULL, "--draft-max", OPT_INT, OFF(draft_max), 1, 16, B, "draft length for --spec (3)"},
    {NULL, "--p-min", OPT_DBL, OFF(p_min), 0, 1, B, "--spec: MTP draft confidence floor (0.05)"},
    {NULL, "--rollback", OPT_STR, OFF(rollback), 0, 0, B,
     "--spec rollback: snapshot|recompute|both (snapshot)"},
    {NULL, "--no-bind", OPT_FLAG, OFF(no_bind), 0, 0, G | L | B | I, "do not bind threads"},
    {NULL, "--isa", OPT_STR, OFF(isa), 0, 0, G | L | B | I, "force kernels: scalar|avx2|avx512"},
};
#undef G
#undef L
#undef B
#undef I

static const char *const cmd_names[] = {"generate", "logits", "bench", "info"};

static const char *name_of(int which)
{
    for (int i = 0; i < 4; i++)
        if (which == 1 << i)
            return cmd_names[i];
    return "?";
}

void cmd_usage(const char *prog, int which)
{
    fprintf(stderr, "usage: %s %s [options]\n", prog, name_of(which));
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (!(opts[i].which & which))
            continue;
        fprintf(stderr, "  %-3s %-14s %s\n", opts[i].shrt ? opts[i].shrt : "", opts[i].lng,
                opts[i].help);
    }
}

static const struct opt *find_opt(const char *arg, int which)
{
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (!(opts[i].which & which))
            continue;
        if ((opts[i].shrt && strcmp(arg, opts[i].shrt) == 0) || strcmp(arg, opts[i].lng) == 0)
            return &opts[i];
    }
    return NULL;
}

/* Store the value of one flag; returns 0 or prints why it is invalid and returns 2. */
static int set_opt(const struct opt *op, const char *val, struct cmd_opts *o)
{
    char *base = (char *)o + op->off, *end = NULL;
    errno = 0;
    if (op->type == OPT_STR) {
        *(const char **)base = val;
        return 0;
    }
    if (op->type == OPT_INT) {
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end || v < op->min || (double)v > op->max) {
            fprintf(stderr, "error: %s expects an integer in [%.0f, %.0f], got '%s'\n", op->lng,
                    op->min, op->max, val);
            return 2;
        }
        *(int64_t *)base = v;
        return 0;
    }
    double v = strtod(val, &end);
    if (errno || end == val || *end || !(v >= op->min && v <= op->max)) {
        fprintf(stderr, "error: %s expects a number in [%g, %g], got '%s'\n", op->lng, op->min,
                op->max, val);
        return 2;
    }
    *(double *)base = v;
    return 0;
}

int cmd_parse(int argc, char **argv, int first, int which, struct cmd_opts *o)
{
    *o = (struct cmd_opts){.n_predict = 64,
                           .top_p = 1.0,
                           .batch = 512,
                           .n_prompt = 512,
                           .n_gen = 64,
                           .reps = 5,
                           .seed = 42,
                           .draft_max = 3,
                           .p_min = 0.05};
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cmd_usage(argv[0], which);
            exit(0);
        }
        const struct opt *op = find_opt(argv[i], which);
        if (!op) {
            fprintf(stderr, "error: unknown option '%s' for '%s'\n", argv[i], name_of(which));
            cmd_usage(argv[0], which);
            return 2;
        }
        if (op->type == OPT_FLAG) {
            *(bool *)((char *)o + op->off) = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", op->lng);
            return 2;
        }
        if (set_opt(op, argv[++i], o))
            return 2;
    }
    if (!o->model && which != CMD_INFO) {
        fprintf(stderr, "error: -m MODEL is required\n");
        cmd_usage(argv[0], which);
        return 2;
    }
    return 0;
}

/* ============================================================================================
 * Engine set-up
 * ========================================================================================== */

static int apply_isa(const char *isa)
{
    if (!isa)
        return 0;
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++)
        if (strcmp(isa, names[i]) == 0) {
            if (kq_isa_force((enum kq_isa)i) != (enum kq_isa)i)
                fprintf(stderr, "warning: --isa %s not supported by this CPU; using %s\n", isa,
                        kq_isa_name(kq_isa_active()));
            return 0;
        }
    fprintf(stderr, "error: --isa expects scalar, avx2 or avx512, got '%s'\n", isa);
    return 2;
}

int cmd_engine_open(struct cmd_engine *e, const struct cmd_opts *o)
{
    char err[1024];
    memset(e, 0, sizeof *e);
    if (apply_isa(o->isa))
        return 2;
    if (model_load(o->model, &e->model, err, sizeof err)) {
        fprintf(stderr,
                "error: %s\nHINT: is it a GGUF of a supported arch (qwen3, qwen35, "
                "qwen35moe, qwen3next)?\n",
                err);
        return 1;
    }
    e->n_dev = (int)(o->tp ? o->tp : 1);
    if (dev_cpu_create_group(e->n_dev, (int)o->threads, !o->no_bind, e->devs, err, sizeof err)) {
        fprintf(stderr, "error: devices: %s\n", err);
        e->n_dev = 0;
        goto fail;
    }
    e->dev = e->devs[0];
    return 0;
fail:
    cmd_engine_close(e);
    return 1;
}

int cmd_engine_ready(struct cmd_engine *e, int64_t n_seq, int64_t n_ctx, int64_t max_tokens)
{
    char err[512];
    struct fwd_params fp = {.max_tokens = max_tokens, .n_seq = n_seq, .n_ctx = n_ctx};
    if (fwd_create_group(e->model, e->devs, e->n_dev, &fp, &e->fwd, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}

void cmd_engine_close(struct cmd_engine *e)
{
    fwd_destroy(e->fwd);
    for (int d = 0; d < e->n_dev; d++)
        dev_destroy(e->devs[d]);
    model_free(e->model);
    memset(e, 0, sizeof *e);
}

static int64_t parse_token_list(const char *s, int64_t n_vocab, int32_t **out)
{
    int64_t cap = 16, n = 0;
    int32_t *v = xmalloc((size_t)cap * sizeof *v);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || x < 0 || x >= n_vocab || (*end && *end != ',')) {
            fprintf(stderr, "error: --tokens: bad token id at '%.20s' (ids are 0..%lld)\n", p,
                    (long long)n_vocab - 1);
            free(v);
            return -1;
        }
        if (n == cap)
            v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    *out = v;
    return n;
}

int64_t cmd_prompt_tokens(const struct cmd_engine *e, const struct cmd_opts *o, int32_t **out)
{
    const tok_t *tok = e->model->tok;
    if (o->tokens)
        return parse_token_list(o->tokens, e->model->hp.n_vocab, out);
    const char *text = o->prompt ? o->prompt : "";
    size_t len = strlen(text);
    int64_t bos = tok_add_bos(tok) && tok_bos(tok) >= 0;
    int64_t need = tok_encode(tok, text, len, true, NULL, 0);
    if (need < 0) {
        fprintf(stderr, "error: cannot tokenize the prompt: %s\n", dd_strerror((int)need));
        return -1;
    }
    int32_t *v = xmalloc((size_t)(need + bos + 1) * sizeof *v);
    if (bos)
        v[0] = tok_bos(tok);
    tok_encode(tok, text, len, true, v + bos, need);
    *out = v;
    return need + bos;
}

int cmd_feed(struct cmd_engine *e, const int32_t *tok, int64_t n, int64_t pos0, int64_t batch,
             float *logits_out, float *hidden_out)
{
    const int64_t V = e->model->hp.n_vocab, E = e->model->hp.n_embd;
    int64_t *pos = xmalloc((size_t)batch * sizeof *pos);
    int32_t *seq = xcalloc((size_t)batch, sizeof *seq);
    uint8_t *want = xmalloc((size_t)batch);
    memset(want, logits_out ? 1 : 0, (size_t)batch);
    int rc = 0;
    char err[512];
    for (int64_t i = 0; i < n && !rc; i += batch) {
        int64_t m = n - i < batch ? n - i : batch;
        for (int64_t j = 0; j < m; j++)
            pos[j] = pos0 + i + j;
        if (!logits_out)
            want[m - 1] = (i + m == n); /* only the very last row */
        struct fwd_batch b = {
            .n_tokens = m, .token = tok + i, .pos = pos, .seq = seq, .logits = want};
        if (fwd_decode(e->fwd, &b, err, sizeof err)) {
            fprintf(stderr, "error: forward: %s\n", err);
            rc = 1;
            break;
        }
        if (logits_out)
            memcpy(logits_out + i * V, fwd_logits(e->fwd), (size_t)(m * V) * sizeof(float));
        if (hidden_out)
            memcpy(hidden_out + i * E, fwd_hidden(e->fwd), (size_t)(m * E) * sizeof(float));
        if (!logits_out)
            want[m - 1] = 0;
    }
    free(pos);
    free(seq);
    free(want);
    return rc;
}
