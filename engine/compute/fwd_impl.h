/*
 * fwd_impl — one device's part of the forward pass, driven by the group (fwd_group.c, the
 * public API of fwd.h). Users include fwd.h only. The device's part is spread over
 * fwd.c (helpers, the spine of a step, lifecycle), fwd_mix.c (the mixers: attention and
 * Gated DeltaNet) and fwd_ffn.c (dense and MoE FFN), which share struct fwd_dev and the
 * fwd__ helpers below; fwd_group.c uses only the fwd__dev_* calls. The group itself
 * (struct fwd_ctx) is shared by fwd_group.c and fwd_dist.c (the processes of an mpirun job).
 *
 * A fwd_dev runs the whole layer stack on its model — the whole model, or its tensor-parallel
 * shard (fewer heads / narrower FFN per layer, a vocab slice of the LM head) — and meets the
 * other devices of its group at the two allreduce points of every layer through comm.
 */
#ifndef DELTAD_FORWARD_IMPL_H
#define DELTAD_FORWARD_IMPL_H

#include "device.h"             // defines: struct dev_mat, struct dev_mm, dev_matmul_multi
#include "dist.h"               // defines: DIST_MAX_RANKS, struct dist_cmd
#include "engine/model/model.h" // defines: struct model, struct model_layer, struct model_w
#include "engine/sched/cache.h" // defines: struct cache
#include "fwd.h"                // defines: struct fwd_batch, struct fwd_params
#include "tpool.h"              // defines: tpool_t

struct comm;

/* One run of consecutive tokens of one sequence inside the batch. */
struct fwd_run {
    int64_t t0, t1; /* rows [t0, t1) */
    int64_t seq;
};

/* A trunk step's graph (fwd.c trunk_step): its shape and where it stands. */
#define FWD_GRAPHS 16    /* shapes kept per device */
#define FWD_GRAPH_RUN 17 /* longest run recorded: a decode row and a draft of up to 16 */
enum fwd_graph_state { FWD_G_FREE, FWD_G_NEW, FWD_G_SEEN, FWD_G_READY, FWD_G_DIRECT };
struct fwd_graph {
    int64_t T, n_runs, n_logits;
    uint64_t used; /* graph_clock at the last use */
    enum fwd_graph_state state;
    struct dev_graph *g; /* FWD_G_READY */
};

/* One device's forward state: its model (or shard), cache and activation buffers. Every
 * buffer marked [dev] is a device address (never dereferenced here); all of them are parts of
 * the device's one allocation (fwd_plan). */

struct fwd_dev {
    const struct model *m; /* the whole model, or this device's shard of it */
    struct dev *dev;
    struct fwd_params p;
    struct cache cache;
    struct comm *comm; /* NULL for a single device */
    int rank;
    struct dev_plan plan;
    struct dev_buf *buf; /* the one allocation: every part of plan */
    /* per-step batch view (borrowed from the group for the duration of a step) */
    const struct fwd_batch *b;
    const struct fwd_run *runs;
    int64_t n_runs;
    bool mix_pending; /* mix holds a block output not yet added to x */
    /* the batch on the device (db: what the ops read) and its host staging */
    struct dev_batch db;
    int32_t *d_tok, *d_seq, *d_rows, *d_sub_row; /* [dev] [T] */
    int64_t *d_pos;                              /* [dev] [T] */
    struct dev_run *d_runs;                      /* [dev] [T] */
    struct dev_run *runs_h;                      /* [T] host staging */
    int32_t *rows_h;                             /* [T] host: rows that want logits */
    /* activations [dev], rows of the batch */
    float *x;     /* [T][E] residual stream */
    float *xn;    /* [T][2E] normalised input of a block (2E for the MTP concat) */
    float *mix;   /* [T][E] block output */
    float *big0;  /* [T][w0] q+gate | GDN qkv | FFN gate | shared expert gate */
    float *big1;  /* [T][w1] k | conv out | FFN up | shared expert up */
    float *big2;  /* [T][w2] v | GDN z | shared expert down */
    float *big3;  /* [T][w3] attention / GDN output before o_proj */
    float *small; /* [T][ws] beta/alpha (or ba) logits, router logits */
    float *beta;  /* [T][Hv] */
    float *decay; /* [T][Hv] */
    float *rope;  /* [T][n_rot] the rotation table of each row's position */
    /* MoE [dev]: the rows routed to each expert, gathered in expert order ("slots") */
    float *route_w;   /* [T][k] routing weights */
    int32_t *route_e; /* [T][k] routing experts, ascending per row */
    int32_t *slot;    /* [T][k] the slot of (row, i) */
    int32_t *e_off;   /* [Nx + 1] first slot of each expert */
    int32_t *e_row;   /* [T * k] the row of each slot */
    float *gath;      /* [T * k][E] xn rows by slot (T > 1) */
    float *eg, *eu;   /* [T * k][ff_exp] expert gate / up (then SwiGLU) by slot */
    float *eout;      /* [T * k][E] expert down projections by slot */
    float *sh_gate;   /* [T] sigmoid gate of the shared expert */
    /* [dev] the hidden pool [2T + n_hrows][E]: rows [0, T) the post-output_norm hidden of
     * every row of the last trunk step, [T, 2T) the MTP block's of the last MTP step, then the
     * caller's kept rows (fwd_hrow) */
    float *hidden;
    float *hid_last; /* [dev] the region of the last step (what fwd_hidden downloads) */
    int32_t *d_hidx; /* [dev] [T] an MTP step's input rows of the pool */
    float *h_prev;   /* [dev] [T][E] the MTP step's input hidden rows */
    /* MTP: the batch of the rows that want logits (the others only fill the KV cache); host */
    struct fwd_batch sub;
    int32_t *sub_tok, *sub_seq; /* [T] */
    int64_t *sub_pos;           /* [T] */
    int32_t *sub_row;           /* [T] the row in the full batch */
    uint8_t *sub_want;          /* [T] all 1 */
    float *hsel;                /* [dev] [T][E] rows that want logits */
    float *logits;              /* [dev] [T][V] */
    int32_t *d_amax;            /* [dev] [T] the argmax of each logits row of this slice */
    float *d_mass;              /* [dev] [T] sum exp(logit - the slice's largest) per row */
    int64_t n_logits;
    int64_t n_hidden;  /* rows of hidden after the last step */
    float *hidden_h;   /* [T][E] host copy of hidden, downloaded on demand */
    bool hidden_fresh; /* hidden_h holds the last step's rows */
    /* graphs of trunk steps by shape (p.graphs on a device with graphs) */
    struct fwd_graph graphs[FWD_GRAPHS];
    uint64_t graph_clock;
    int64_t n_captures, n_replays;
};

/* ---- helpers shared by the files of one device's forward pass ---- */

static inline struct dev_mat fwd__mat(const struct model_w *w)
{
    return (struct dev_mat){
        .data = w->data, .type = w->type, .n_in = w->ne[0], .n_out = w->ne[1], .row_bytes = w->nb1};
}

/* One product of a dev_matmul_multi call: y [T][n_out] = x [T][n_in] * w. */
static inline struct dev_mm fwd__mm(const struct model_w *w, const float *x, int64_t T, float *y)
{
    return (struct dev_mm){.w = fwd__mat(w), .x = x, .T = T, .y = y};
}

void fwd__matmul(struct fwd_dev *f, const struct model_w *w, const float *x, int64_t T, float *y);

/* The layer kinds (fwd_mix.c, fwd_ffn.c): xn [T][E] -> out [T][E], partial over the
 * devices of a group (the caller reduces). */
void fwd__attn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix);
/* The attention layer's K/V store alone (rows whose output nobody reads). */
void fwd__attn_kv(struct fwd_dev *f, int64_t il, const float *xn);
void fwd__gdn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix);
void fwd__ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out);

/* ---- one device's lifecycle and steps (fwd.c) ---- */

int fwd__dev_create(const struct model *m, struct dev *d, const struct fwd_params *p,
                    struct comm *comm, int rank, struct fwd_dev **out, char *err, size_t errlen);
void fwd__dev_destroy(struct fwd_dev *f);
/* The batch was validated by the group; runs are its per-sequence runs. */
void fwd__dev_decode(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                     int64_t n_runs);
/* h_prev [T][E] host rows, or (h_prev NULL) h_rows [T] rows of the hidden pool. */
void fwd__dev_mtp(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                  int64_t n_runs, const float *h_prev, const int32_t *h_rows);
struct cache *fwd__dev_cache(struct fwd_dev *f);
void fwd__dev_graph_stats(const struct fwd_dev *f, int64_t *captures, int64_t *replays);
/* This device's logits rows [*n_rows][vocab_hi - vocab_lo of its model], a device address. */
const float *fwd__dev_logits(const struct fwd_dev *f, int64_t *n_rows);
/* The index of the largest logit of each row of this device's slice, into d_amax (device
 * [n_rows], returned); n_rows as fwd__dev_logits. The device's slice must not be empty. */
const int32_t *fwd__dev_argmax(struct fwd_dev *f, int64_t *n_rows, const float **mass);
/* The last step's hidden rows [T][n_embd] (replicated), downloaded to the host on demand. */
const float *fwd__dev_hidden(struct fwd_dev *f);
/* The device address of row `row` of the hidden pool (asserted in range). */
float *fwd__dev_hrow(const struct fwd_dev *f, int32_t row);
struct dev *fwd__dev_device(const struct fwd_dev *f);
const struct model *fwd__dev_model(const struct fwd_dev *f);

/* ---- the group (fwd_group.c) and its processes (fwd_dist.c) ---- */

/* The group: this process's devices, and under mpirun those of the other processes (fwd.h). */
#define FWD_MAX_DEV 64 /* devices of a group, over every process */

struct fwd_ctx {
    const struct model *m; /* the whole model */
    struct fwd_params p;
    int n;
    struct fwd_dev *dev[FWD_MAX_DEV];
    struct model *shard[FWD_MAX_DEV]; /* owned shards (n > 1, relaid-out or uploaded weights) */
    struct dev *wdev[FWD_MAX_DEV];    /* the device holding wbuf[d] */
    struct dev_buf
        *wbuf[FWD_MAX_DEV];  /* device d's uploaded weights (no host_weights), else NULL */
    struct comm *comm;       /* n > 1 */
    tpool_t *hosts;          /* n > 1: one host thread per device */
    bool bound[FWD_MAX_DEV]; /* host thread d was bound near device d (its first step) */
    struct fwd_run *runs;    /* [max_tokens] */
    int64_t n_runs;
    float *logits; /* [max_tokens][n_vocab] host: the devices' rows, gathered on demand */
    int64_t n_logits;
    bool logits_fresh;    /* logits holds the last step's rows */
    int32_t *amax;        /* [max_tokens] host: the argmax of each logits row (fwd_argmax) */
    int32_t *amax_d;      /* [n][max_tokens] host: each device's slice argmax */
    float *amax_v;        /* [n + 1][max_tokens] host: the values at them (a group), the best */
    float *amax_m;        /* [n][max_tokens] host: each slice's mass (fwd_top_prob) */
    float *prob;          /* [max_tokens] host: the argmax's softmax probability (fwd_top_prob) */
    bool want_mass;       /* the argmax under way sums the masses too */
    bool prob_fresh;      /* prob (and amax) hold the last step's rows */
    bool amax_fresh;      /* amax holds the last step's rows */
    int64_t sample_bytes; /* bytes fwd_logits and fwd_argmax downloaded */
    /* the step in flight, read by the host threads */
    const struct fwd_batch *b;
    bool mtp;              /* an MTP step, its input rows: */
    const float *h_prev;   /* host rows, or */
    const int32_t *h_rows; /* rows of the hidden pool */
    float *h_host;         /* n_proc > 1: [max_tokens][n_embd] pool rows sent to the workers */
    /* across processes (n_proc > 1; see the top) */
    int n_proc, me;
    int n_total;                       /* devices of every process */
    int64_t dev0[DIST_MAX_RANKS + 1];  /* first global device of each process; [n_proc] total */
    int64_t ckpt0[DIST_MAX_RANKS + 1]; /* checkpoint floats before each process's part */
    int64_t kv0[DIST_MAX_RANKS + 1];   /* KV floats per position before each process's part */
    int64_t wpre[DIST_MAX_RANKS + 1];  /* logits columns (vocab) of the processes before each */
    int64_t vlo[FWD_MAX_DEV], vhi[FWD_MAX_DEV]; /* each global device's vocab slice */
    uint8_t *wire;                              /* [wire_cap] a step's packed batch */
    size_t wire_cap;
    float *stage; /* [stage_cap] worker: its parts; rank 0: the logits blocks of the processes */
    size_t stage_cap;
    bool live; /* created on every process: fwd_destroy tells the workers */
};

/* The commands of rank 0 to the workers (dist_cmd.op; arguments in arg[0..3], the payload's
 * bytes in arg[4]). */
enum {
    OP_SETUP = 1, /* payload struct fwd_params */
    OP_DECODE,    /* arg: n_tokens, has logits flags; payload: the packed batch */
    OP_MTP,       /* the same plus h_prev */
    OP_CLEAR,     /* s */
    OP_ROLLBACK,  /* s, r */
    OP_SAVE,      /* s; each worker sends its part */
    OP_RESTORE,   /* s; rank 0 sends each worker its part */
    OP_KV_COPY,   /* dst, src, r0, r1 */
    OP_KV_DOWN,   /* s, r0, r1, n; each worker sends its part */
    OP_KV_UP,     /* s, r0, r1, n; rank 0 sends each worker its part */
    OP_DESTROY,
};

/* fwd_group.c: the step and the cache operations on this process's devices. */
int fwd__check_batch(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen);
void fwd__local_step(struct fwd_ctx *f, const struct fwd_batch *b, bool mtp, const float *h_prev,
                     const int32_t *h_rows);
size_t fwd__local_ckpt_floats(const struct fwd_ctx *f);
size_t fwd__local_kv_floats(const struct fwd_ctx *f);
void fwd__local_clear(struct fwd_ctx *f, int64_t s);
bool fwd__local_rollback(struct fwd_ctx *f, int64_t s, int64_t r);
void fwd__local_save(const struct fwd_ctx *f, int64_t s, float *dst);
void fwd__local_restore(struct fwd_ctx *f, int64_t s, const float *src);
void fwd__local_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1);
void fwd__local_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                            float *dst);
void fwd__local_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                          const float *src);
/* Build this process's part of a group (every process of a job calls it: rank 0 from
 * fwd_create_group, a worker on OP_SETUP). */
int fwd__group_create(const struct model *m, struct dev **devs, int n_dev,
                      const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen);

/* fwd_dist.c: between the processes (rank 0's side; the workers' is fwd_worker_run). */
/* Command c, with bytes of payload when bytes > 0, to every worker. */
int fwd__post(struct dist_cmd c, const void *payload, size_t bytes);
/* Each worker's part p of base, floats [at[p] * mul, at[p + 1] * mul): sent or received. */
int fwd__parts(const struct fwd_ctx *f, float *base, const int64_t *at, int64_t mul, bool send);
/* Batch b (and h_prev) packed into f->wire; returns its bytes. */
size_t fwd__wire_pack(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev);
/* The workers' logits slices of the step into f->logits (rank 0's own are there already). */
int fwd__gather_logits(struct fwd_ctx *f);
/* DD_EIO with dist's message in err. */
int fwd__broken(char *err, size_t errlen);
/* Group creation across the processes: the global device numbering (before the shards), then
 * whether every process built its part and the sizes of the parts (after); rc is this
 * process's own result so far. The same answer on every process. */
int fwd__proc_layout(struct fwd_ctx *f, int rc, char *err, size_t errlen);
int fwd__proc_settle(struct fwd_ctx *f, int rc, char *err, size_t errlen);

#endif
