/*
 * cmd — option table and shared engine set-up of the offline subcommands (see cmd.h).
 *
 * The option table drives parsing, validation, defaults and the usage text, with the row type
 * of the daemon's config table (struct cfg_row, server/config/cfg.h): a flag that is a config
 * key names the key and takes its row (type, range, default, help) as it is; a flag of the
 * subcommands only carries a row of its own. Values go through cfg_row_set either way, and
 * --help is rendered by cfg_row_help, so no default is written twice.
 */
#include "cmd.h" // defines: cmd_parse, cmd_engine_open

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/dev_cuda.h" // defines: dev_cuda_built
#include "engine/model/tok.h"        // defines: tok_encode
#include "engine/util.h"             // defines: xmalloc, ASSERT
#include "kernels/cpu/kq.h"          // defines: kq_isa_force
#include "server/config/cfg.h"       // defines: struct cfg_row, cfg_row_find, cfg_row_set

/* One flag: its spellings, the subcommands that take it, and its row. */
struct cmd_opt {
    const char *shrt;   /* "-b", or NULL */
    const char *lng;    /* "--batch"; NULL = the row's name with dashes */
    int which;          /* CMD_* mask */
    const char *key;    /* a config key: its row of the daemon's table, with off from row */
    struct cfg_row row; /* the subcommands' own row when key is NULL; off into struct cmd_opts */
    const char *def;    /* a default of the subcommands in place of the row's, or NULL */
    const char *set;    /* the value of a flag that takes none (--no-bind), or NULL */
};

#define G CMD_GENERATE
#define L CMD_LOGITS
#define B CMD_BENCH
#define I CMD_INFO
#define OFF(f) offsetof(struct cmd_opts, f)
/* A config key's row, stored into field f. */
#define KEY(s, l, w, k, f)                                                                         \
    {                                                                                              \
        s, l, w, k, {.off = OFF(f)}, NULL, NULL                                                    \
    }
/* A row of the subcommands' own: name (the flag with '_' for '-'), type, default, range. */
#define OWN(s, w, name, type, def, lo, hi, f, choices, help)                                       \
    {                                                                                              \
        s, NULL, w, NULL, {name, type, def, lo, hi, 0, OFF(f), choices, help}, NULL, NULL          \
    }
/* A free-text row of the subcommands' own (control characters allowed: prompts). */
#define TEXT(s, w, name, f, help)                                                                  \
    {                                                                                              \
        s, NULL, w, NULL, {name, CFG_STR, "", 0, 1 << 24, CFG_TEXT, OFF(f), NULL, help}, NULL,     \
            NULL                                                                                   \
    }
static const struct cmd_opt opts[] = {
    /* ---- config keys ---- */
    {"-m", "--model", G | L | B | I, "model", {.off = OFF(model)}, "", NULL},
    KEY(NULL, NULL, G | L | B | I, "devices", devices),
    KEY("-t", NULL, G | L | B | I, "threads", threads),
    {NULL, "--no-bind", G | L | B | I, "bind_threads", {.off = OFF(bind)}, NULL, "false"},
    KEY(NULL, NULL, G | L | B, "cuda_graphs", cuda_graphs),
    KEY("-b", "--batch", G | L | B, "max_batch_tokens", batch),
    KEY("-c", NULL, G | L | I, "ctx", ctx),
    KEY(NULL, NULL, G, "spec_type", spec_type),
    KEY(NULL, "--draft-max", G | B, "spec_draft_max", draft_max),
    KEY(NULL, "--p-min", G | B, "spec_p_min", p_min),
    /* ---- the subcommands' own ---- */
    OWN(NULL, G | L | B | I, "tp", CFG_INT, "1", 1, 64, tp, NULL,
        "alias: --tp N is --devices cpu:N"),
    TEXT("-p", G | L, "prompt", prompt, "prompt text (special tokens parsed)"),
    OWN("-p", B, "n_prompt", CFG_INT, "512", 1, 65536, n_prompt, NULL, "prompt tokens for prefill"),
    OWN("-n", G, "n_predict", CFG_INT, "64", 0, 1 << 20, n_predict, NULL, "tokens to generate"),
    OWN("-n", B, "n_gen", CFG_INT, "64", 1, 65536, n_gen, NULL, "tokens to decode"),
    OWN(NULL, L, "tokens", CFG_STR, "", 0, 1 << 24, tokens, NULL, "comma-separated token ids"),
    OWN("-o", L, "output", CFG_STR, "", 0, 4096, out, NULL, "output file (float32 rows)"),
    OWN(NULL, L, "mtp", CFG_BOOL, "false", 0, 0, mtp, NULL, "also write the MTP head's logits"),
    OWN(NULL, G, "temp", CFG_FLOAT, "0", 0, 100, temp, NULL, "sampling temperature (0 = greedy)"),
    OWN(NULL, G, "top_k", CFG_INT, "0", 0, 1 << 30, top_k, NULL, "top-k (0 = off)"),
    OWN(NULL, G, "top_p", CFG_FLOAT, "1", 0, 1, top_p, NULL, "top-p (1 = off)"),
    OWN(NULL, G, "min_p", CFG_FLOAT, "0", 0, 1, min_p, NULL, "min-p (0 = off)"),
    OWN(NULL, G, "presence_penalty", CFG_FLOAT, "0", -2, 2, presence_penalty, NULL,
        "OpenAI presence penalty over the generated tokens (0 = off)"),
    OWN(NULL, G, "frequency_penalty", CFG_FLOAT, "0", -2, 2, frequency_penalty, NULL,
        "OpenAI frequency penalty over the generated tokens (0 = off)"),
    OWN(NULL, G, "repetition_penalty", CFG_FLOAT, "1", 1e-3, 10, repetition_penalty, NULL,
        "multiplicative repetition penalty, llama.cpp's (1 = off)"),
    OWN(NULL, G, "seed", CFG_INT, "42", 0, (double)INT64_MAX, seed, NULL, "RNG seed"),
    {NULL,
     NULL,
     G,
     NULL,
     {"stop", CFG_STR, "", 1, 1024, CFG_TEXT, 0, NULL,
      "stop string, never printed; repeat the flag for more (up to 16)"},
     NULL,
     NULL},
    OWN("-r", B, "reps", CFG_INT, "5", 1, 1000, reps, NULL, "repetitions, median reported"),
    OWN("-d", B, "depth", CFG_INT, "0", 0, 1 << 20, depth, NULL, "context depth before decode"),
    OWN(NULL, B, "parallel", CFG_STR, "", 0, 256, parallel, NULL,
        "decode B sequences together for each B of this list (1,2,4,8): aggregate tok/s"),
    OWN(NULL, B, "spec", CFG_ENUM, "none", 0, 0, spec, "none|ngram|mtp|ngram,mtp|all",
        "compare decode with these speculation types"),
    TEXT(NULL, B, "text", text, "prompt text for --spec (special tokens parsed; \"\" = built in)"),
    TEXT(NULL, B, "schema", schema,
         "a JSON Schema file: decode constrained by it vs unconstrained (tokens/s, mask time)"),
    TEXT(NULL, B, "grammar", grammar, "a GBNF grammar file: the same with a grammar"),
    OWN(NULL, B, "rollback", CFG_ENUM, "snapshot", 0, 0, rollback, "snapshot|recompute|both",
        "--spec: undo rejected drafts by state snapshots, by recomputation, or compare both"),
    OWN(NULL, G | L | B | I, "isa", CFG_ENUM, "auto", 0, 0, isa, "auto|scalar|avx2|avx512",
        "force a kernel family"),
};
#undef KEY
#undef OWN
#undef TEXT
#undef G
#undef L
#undef B
#undef I
#define N_OPTS ((int)(sizeof opts / sizeof opts[0]))

static const char *const cmd_names[] = {"generate", "logits", "bench", "info"};

static const char *name_of(int which)
{
    for (int i = 0; i < 4; i++)
        if (which == 1 << i)
            return cmd_names[i];
    return "?";
}

/* The row a flag parses with: the config key's (stored into the flag's field) or its own, with
 * the subcommands' default where the flag has one. */
static struct cfg_row row_of(const struct cmd_opt *op)
{
    struct cfg_row r = op->row;
    if (op->key) {
        const struct cfg_row *k = cfg_row_find(op->key);
        ASSERT(k); /* a key of the table that is not a config key is a bug */
        r = *k;
        r.off = op->row.off;
    }
    if (op->def)
        r.def = op->def;
    return r;
}

/* arg equals flag, '-' and '_' alike after the leading "--". */
static bool flag_eq(const char *arg, const char *flag)
{
    if (strncmp(arg, "--", 2) != 0 || strncmp(flag, "--", 2) != 0)
        return strcmp(arg, flag) == 0;
    for (arg += 2, flag += 2; *arg && *flag; arg++, flag++) {
        char a = *arg == '_' ? '-' : *arg, b = *flag == '_' ? '-' : *flag;
        if (a != b)
            return false;
    }
    return *arg == *flag;
}

/* "-b, --batch" or "    --spec-type": the spellings --help shows. */
static const char *flag_text(const struct cmd_opt *op, char *buf, size_t cap)
{
    char lng[80];
    struct cfg_row r = row_of(op);
    const char *l = op->lng ? op->lng : cfg_row_flag(&r, lng, sizeof lng);
    snprintf(buf, cap, "%s%s%s", op->shrt ? op->shrt : "", op->shrt ? ", " : "    ", l);
    char k[80];
    if (op->lng && !flag_eq(op->lng, cfg_row_flag(&r, k, sizeof k))) { /* --batch: the key's */
        size_t n = strlen(buf);                                        /* spelling works too */
        snprintf(buf + n, cap - n, " | %s", k);
    }
    return buf;
}

void cmd_usage(FILE *f, const char *prog, int which)
{
    fprintf(f,
            "usage: %s %s [options]\n\nFlags take '-' or '_' alike (--top-p, --top_p) and "
            "--flag VALUE or --flag=VALUE;\na boolean flag alone means true.\n\n",
            prog, name_of(which));
    char flag[128];
    int width = 0;
    for (int i = 0; i < N_OPTS; i++) {
        int len = (int)strlen(flag_text(&opts[i], flag, sizeof flag));
        width = (opts[i].which & which) && len > width ? len : width;
    }
    for (int i = 0; i < N_OPTS; i++) {
        if (!(opts[i].which & which))
            continue;
        struct cfg_row r = row_of(&opts[i]);
        if (opts[i].set) /* a flag without a value: show what it sets */
            fprintf(f, "  %-*s sets %s = %s\n", width, flag_text(&opts[i], flag, sizeof flag),
                    r.name, opts[i].set);
        else
            cfg_row_help(f, &r, flag_text(&opts[i], flag, sizeof flag), width);
    }
}

static const struct cmd_opt *find_opt(const char *arg, int which)
{
    for (int i = 0; i < N_OPTS; i++) {
        const struct cmd_opt *op = &opts[i];
        if (!(op->which & which))
            continue;
        struct cfg_row r = row_of(op);
        char key[80];
        if ((op->shrt && strcmp(arg, op->shrt) == 0) || (op->lng && flag_eq(arg, op->lng)) ||
            flag_eq(arg, cfg_row_flag(&r, key, sizeof key)))
            return op;
    }
    return NULL;
}

/* Store val for flag op (named shown in messages). --stop appends, --tp sets devices too.
 * Returns 0 or prints why val is invalid and returns 2. */
static int set_opt(const struct cmd_opt *op, const char *shown, const char *val, struct cmd_opts *o)
{
    char msg[512];
    struct cfg_row r = row_of(op);
    if (strcmp(r.name, "stop") == 0) { /* repeatable: parsed into a fresh slot */
        char *one = NULL;
        if (o->n_stop == CMD_MAX_STOP) {
            fprintf(stderr, "error: %s: more than %d stop strings\n", shown, CMD_MAX_STOP);
            return 2;
        }
        if (cfg_row_set(&r, &one, val, msg, sizeof msg)) {
            fprintf(stderr, "error: %s: %s\n", shown, msg);
            return 2;
        }
        o->stop[o->n_stop++] = one;
        return 0;
    }
    if (cfg_row_set(&r, o, val, msg, sizeof msg)) {
        fprintf(stderr, "error: %s: %s\n", shown, msg);
        return 2;
    }
    if (strcmp(r.name, "tp") == 0) { /* the alias: --tp N is --devices cpu:N */
        char dev[32];
        snprintf(dev, sizeof dev, "cpu:%lld", (long long)o->tp);
        return set_opt(find_opt("--devices", CMD_INFO), "--devices", dev, o);
    }
    return 0;
}

/* The defaults of every row (all subcommands: every field is valid whichever command runs). */
static void set_defaults(struct cmd_opts *o)
{
    char msg[256];
    memset(o, 0, sizeof *o);
    for (int i = 0; i < N_OPTS; i++) {
        struct cfg_row r = row_of(&opts[i]);
        if (strcmp(r.name, "stop") != 0 && strcmp(r.name, "tp") != 0)
            ASSERT(cfg_row_set(&r, o, r.def, msg, sizeof msg) == 0);
    }
}

void cmd_opts_free(struct cmd_opts *o)
{
    for (int i = 0; i < N_OPTS; i++) {
        struct cfg_row r = row_of(&opts[i]);
        if (r.type == CFG_STR && strcmp(r.name, "stop") != 0) {
            char **p = (char **)((char *)o + r.off);
            free(*p);
            *p = NULL;
        }
    }
    for (int i = 0; i < o->n_stop; i++)
        free(o->stop[i]);
    o->n_stop = 0;
}

/* One argument at argv[*i] ("-f V", "--flag V", "--flag=V", "--flag"); advances *i past the
 * value it consumed. Returns 0 or 2 after printing the error. */
static int parse_one(int argc, char **argv, int *i, int which, struct cmd_opts *o)
{
    char name[128];
    const char *a = argv[*i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
    const struct cmd_opt *op = find_opt(name, which);
    if (!op) {
        fprintf(stderr, "error: unknown option '%s' for '%s'\n", name, name_of(which));
        cmd_usage(stderr, argv[0], which);
        return 2;
    }
    struct cfg_row r = row_of(op);
    char lng[80]; /* messages name the long flag, whichever spelling was typed */
    const char *shown = op->lng ? op->lng : cfg_row_flag(&r, lng, sizeof lng);
    if (op->set && !eq)
        return set_opt(op, shown, op->set, o);
    const char *val = eq ? eq + 1 : NULL;
    bool next_is_flag = *i + 1 >= argc || argv[*i + 1][0] == '-';
    if (!val && r.type == CFG_BOOL && next_is_flag)
        val = "true";
    if (!val && *i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", shown);
        return 2;
    }
    if (!val)
        val = argv[++*i];
    return set_opt(op, shown, val, o);
}

int cmd_parse(int argc, char **argv, int first, int which, struct cmd_opts *o)
{
    set_defaults(o);
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cmd_usage(stdout, argv[0], which);
            cmd_opts_free(o);
            exit(0);
        }
        if (parse_one(argc, argv, &i, which, o))
            return 2;
    }
    char msg[256];
    if (dev_spec_parse(o->devices, &o->dev_spec, msg, sizeof msg)) {
        fprintf(stderr, "error: --devices: %s\n", msg);
        return 2;
    }
    if (o->dev_spec.cuda && !dev_cuda_built()) {
        fprintf(stderr, "error: --devices %s: this build has no CUDA (rebuild with make CUDA=1)\n",
                o->devices);
        return 2;
    }
    if (!*o->model && which != CMD_INFO) {
        fprintf(stderr, "error: -m MODEL is required\n");
        cmd_usage(stderr, argv[0], which);
        return 2;
    }
    return 0;
}

/* ============================================================================================
 * Engine set-up
 * ========================================================================================== */

static void apply_isa(int isa)
{
    static const char *const names[] = {"auto", "scalar", "avx2", "avx512"};
    if (isa == CMD_ISA_AUTO)
        return;
    enum kq_isa want = (enum kq_isa)(isa - CMD_ISA_SCALAR);
    if (kq_isa_force(want) != want)
        fprintf(stderr, "warning: --isa %s not supported by this CPU; using %s\n", names[isa],
                kq_isa_name(kq_isa_active()));
}

int cmd_engine_open(struct cmd_engine *e, const struct cmd_opts *o)
{
    char err[1024];
    memset(e, 0, sizeof *e);
    apply_isa(o->isa);
    if (model_load(o->model, &e->model, err, sizeof err)) {
        fprintf(stderr,
                "error: %s\nHINT: is it a GGUF of a supported arch (qwen3, qwen35, "
                "qwen35moe, qwen3next)?\n",
                err);
        return 1;
    }
    /* threads is per device, as in the daemon (devices = cpu:N, threads = per CPU device) */
    if (dev_group_create(&o->dev_spec, (int)o->threads, o->bind, e->devs, &e->n_dev, err,
                         sizeof err)) {
        fprintf(stderr, "error: devices: %s\n", err);
        e->n_dev = 0;
        goto fail;
    }
    e->dev = e->devs[0];
    e->graphs = o->cuda_graphs;
    return 0;
fail:
    cmd_engine_close(e);
    return 1;
}

int cmd_engine_ready(struct cmd_engine *e, int64_t n_seq, int64_t n_ctx, int64_t max_tokens)
{
    char err[512];
    struct fwd_params fp = {
        .max_tokens = max_tokens, .n_seq = n_seq, .n_ctx = n_ctx, .graphs = e->graphs};
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
    if (*o->tokens)
        return parse_token_list(o->tokens, e->model->hp.n_vocab, out);
    const char *text = o->prompt;
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
