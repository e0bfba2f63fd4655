/*
 * metrics — Prometheus counters and histograms (see metrics.h).
 *
 * Storage is fixed at creation: a counter per (endpoint, status) pair from a short status
 * table (anything else counts as status "other"), a counter per finish reason, and three
 * histograms with fixed bucket bounds. Updates are relaxed atomics, so HTTP threads never
 * take a lock to count.
 *
 * Inter-token latency is observed once per generation with its mean gap, weighted by the number
 * of gaps (completion_tokens - 1): the engine reports first and last token times, not every
 * gap. Sums are kept in nanoseconds as integers.
 *
 * Thread safety: any thread.
 */
#include "metrics.h" // defines: metrics_t, metrics_render

#include <dirent.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/sched/gram.h" // defines: gram_get_stats, gram_hist_bound
#include "engine/util.h"       // defines: xcalloc, struct dd_buf

/* Statuses with a series of their own: what this server can answer. Anything else (499 for a
 * client that left before an answer, say) is counted as "other", keeping the label set small
 * and fixed. */
static const int statuses[] = {200, 204, 400, 401, 404, 405, 413, 429, 500, 501, 503};
#define N_STATUS (sizeof statuses / sizeof statuses[0] + 1) /* + "other" */

static const char *const ep_names[METRICS_EP_COUNT] = {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/health",
    "/metrics",
    "/slots",
    "/tokenize",
    "/detokenize",
    "/v1/responses",
    "/v1/messages",
    "other",
};

/* Indexed by enum eng_finish. */
static const char *const finish_names[] = {"none",    "stop",  "length",     "cancelled",
                                           "timeout", "error", "unavailable"};
#define N_FINISH (sizeof finish_names / sizeof finish_names[0])

static const char *const reject_names[] = {"queue_full", "draining", "loading"};
#define N_REJECT (sizeof reject_names / sizeof reject_names[0])

#define MAX_BUCKETS 12
struct hist {
    const char *name, *help;
    double bound[MAX_BUCKETS];               /* upper bounds, seconds, ascending; 0 ends the list */
    _Atomic uint64_t count[MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    _Atomic uint64_t n, sum_ns;
};

/* Everything is a relaxed atomic: counters need no ordering among themselves. */
struct metrics {
    _Atomic uint64_t requests[METRICS_EP_COUNT][N_STATUS];
    _Atomic int64_t active, streams;
    _Atomic uint64_t cancelled, rejected[N_REJECT], finished[N_FINISH];
    struct hist ttft, itl, e2e;
};

/* ---- updates --------------------------------------------------------------------------- */

/* Bucket bounds: TTFT spans a cached short prompt to a long prefill; inter-token latency
 * spans speculative bursts (~1 ms) to a loaded CPU (~1 s); end-to-end up to 5 minutes. */
metrics_t *metrics_create(void)
{
    metrics_t *m = xcalloc(1, sizeof *m);
    m->ttft = (struct hist){.name = "deltad_time_to_first_token_seconds",
                            .help = "Time from submission to the first generated token.",
                            .bound = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    m->itl = (struct hist){.name = "deltad_inter_token_latency_seconds",
                           .help = "Mean time between generated tokens, per generation.",
                           .bound = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
    m->e2e = (struct hist){.name = "deltad_e2e_request_latency_seconds",
                           .help = "Time from submission to the end of a generation.",
                           .bound = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
    return m;
}

void metrics_destroy(metrics_t *m)
{
    free(m);
}

static size_t status_index(int status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++)
        if (statuses[i] == status)
            return i;
    return N_STATUS - 1;
}

void metrics_request(metrics_t *m, enum metrics_ep ep, int status)
{
    if ((unsigned)ep >= METRICS_EP_COUNT)
        ep = METRICS_EP_OTHER;
    atomic_fetch_add_explicit(&m->requests[ep][status_index(status)], 1, memory_order_relaxed);
}

void metrics_active_add(metrics_t *m, int64_t d, bool stream)
{
    atomic_fetch_add_explicit(&m->active, d, memory_order_relaxed);
    if (stream)
        atomic_fetch_add_explicit(&m->streams, d, memory_order_relaxed);
}

void metrics_cancelled(metrics_t *m)
{
    atomic_fetch_add_explicit(&m->cancelled, 1, memory_order_relaxed);
}

void metrics_rejected(metrics_t *m, const char *reason)
{
    for (size_t i = 0; i < N_REJECT; i++)
        if (strcmp(reason, reject_names[i]) == 0)
            atomic_fetch_add_explicit(&m->rejected[i], 1, memory_order_relaxed);
}

/* Add `weight` observations of value v (seconds). */
static void observe(struct hist *h, double v, uint64_t weight)
{
    if (!(v >= 0) || weight == 0)
        return;
    size_t b = 0;
    while (b < MAX_BUCKETS && h->bound[b] > 0 && v > h->bound[b])
        b++;
    if (b < MAX_BUCKETS && h->bound[b] == 0)
        b = MAX_BUCKETS; /* past the last bound: +Inf */
    atomic_fetch_add_explicit(&h->count[b], weight, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->n, weight, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(v * 1e9) * weight, memory_order_relaxed);
}

void metrics_generation(metrics_t *m, const struct metrics_gen *g)
{
    if ((unsigned)g->finish < N_FINISH)
        atomic_fetch_add_explicit(&m->finished[g->finish], 1, memory_order_relaxed);
    if (g->t_queued <= 0)
        return;
    if (g->t_first > 0)
        observe(&m->ttft, g->t_first - g->t_queued, 1);
    if (g->t_done > 0)
        observe(&m->e2e, g->t_done - g->t_queued, 1);
    if (g->t_first > 0 && g->t_done > g->t_first && g->completion_tokens > 1) {
        uint64_t gaps = (uint64_t)(g->completion_tokens - 1);
        observe(&m->itl, (g->t_done - g->t_first) / (double)gaps, gaps);
    }
}

/* ---- rendering ------------------------------------------------------------------------- */

/* printf into the page; a line longer than 511 bytes (none is) would be cut, not overflow. */
static void outf(struct dd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(struct dd_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        dd_buf_put(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* The HELP and TYPE lines every series starts with (present even when the series is empty,
 * so dashboards and tests find every name from the first scrape). */
static void head(struct dd_buf *b, const char *name, const char *type, const char *help)
{
    outf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t ld(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void render_requests(struct dd_buf *b, metrics_t *m)
{
    head(b, "deltad_http_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (int e = 0; e < METRICS_EP_COUNT; e++) {
        for (size_t s = 0; s < N_STATUS; s++) {
            uint64_t v = ld(&m->requests[e][s]);
            if (v == 0)
                continue;
            char st[16];
            snprintf(st, sizeof st, s < N_STATUS - 1 ? "%d" : "other",
                     s < N_STATUS - 1 ? statuses[s] : 0);
            outf(b, "deltad_http_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", ep_names[e],
                 st, (unsigned long long)v);
        }
    }
    head(b, "deltad_requests_active", "gauge", "Generation requests in flight.");
    outf(b, "deltad_requests_active %lld\n", (long long)atomic_load(&m->active));
    head(b, "deltad_streams_active", "gauge", "Streaming responses open.");
    outf(b, "deltad_streams_active %lld\n", (long long)atomic_load(&m->streams));
    head(b, "deltad_requests_cancelled_total", "counter", "Generations cancelled by the client.");
    outf(b, "deltad_requests_cancelled_total %llu\n", (unsigned long long)ld(&m->cancelled));
    head(b, "deltad_requests_rejected_total", "counter", "Requests refused for capacity.");
    for (size_t i = 0; i < N_REJECT; i++)
        outf(b, "deltad_requests_rejected_total{reason=\"%s\"} %llu\n", reject_names[i],
             (unsigned long long)ld(&m->rejected[i]));
    head(b, "deltad_request_success_total", "counter", "Finished generations by finish reason.");
    for (size_t i = 1; i < N_FINISH; i++)
        outf(b, "deltad_request_success_total{finish_reason=\"%s\"} %llu\n", finish_names[i],
             (unsigned long long)ld(&m->finished[i]));
}

/* Draft acceptance by position in the draft (position 0 = the first drafted token): where
 * acceptance falls off tells how long drafts should be. */
static void render_spec_positions(struct dd_buf *b, const struct eng_stats *es)
{
    int64_t n = es->draft_max < ENG_MAX_DRAFT ? es->draft_max : ENG_MAX_DRAFT;
    head(b, "deltad_spec_accepted_at_position_total", "counter",
         "Accepted draft tokens by position in the draft.");
    for (int64_t i = 0; i < n; i++)
        outf(b, "deltad_spec_accepted_at_position_total{position=\"%lld\"} %lld\n", (long long)i,
             (long long)es->accepted_at[i]);
    head(b, "deltad_spec_drafted_at_position_total", "counter",
         "Drafted tokens by position in the draft.");
    for (int64_t i = 0; i < n; i++)
        outf(b, "deltad_spec_drafted_at_position_total{position=\"%lld\"} %lld\n", (long long)i,
             (long long)es->drafted_at[i]);
}

/* The prompt cache (issue 36): hit tokens by the tier that served them, and the tiers. */
static void render_pcache(struct dd_buf *b, const struct eng_stats *es)
{
    head(b, "deltad_prompt_cache_hit_tokens_total", "counter",
         "Prompt tokens served by the prompt cache, by tier (slot: in place or copied from "
         "another slot).");
    const char *tier[] = {"slot", "ram", "disk"};
    const int64_t hit[] = {es->pc_hit_slot, es->pc_hit_ram, es->pc_hit_disk};
    for (int i = 0; i < 3; i++)
        outf(b, "deltad_prompt_cache_hit_tokens_total{tier=\"%s\"} %lld\n", tier[i],
             (long long)hit[i]);
    struct {
        const char *name, *type, *help;
        int64_t v;
    } rows[] = {
        {"deltad_prompt_cache_queries_total", "counter", "Requests that looked for a prefix.",
         es->pc_queries},
        {"deltad_prompt_cache_slot_copies_total", "counter",
         "Prefixes copied from one slot into another.", es->pc_copies},
        {"deltad_prompt_cache_saved_total", "counter",
         "Checkpoints saved to RAM / disk (write-behind, or when a slot dropped them).",
         es->pc_demoted},
        {"deltad_prompt_cache_saves_abandoned_total", "counter",
         "Checkpoint saves given up: a request overwrote the slot's rows before the save was "
         "done, and copying them first would have delayed its first token.",
         es->pc_abandoned},
        {"deltad_prompt_cache_evictions_total", "counter",
         "Saved prefixes dropped from RAM (least recently used first).", es->pc_ram_evictions},
        {"deltad_prompt_cache_ram_bytes", "gauge", "Bytes of saved prefixes in RAM.",
         es->pc_ram_bytes},
        {"deltad_prompt_cache_ram_entries", "gauge", "Saved prefixes in RAM.", es->pc_ram_entries},
        {"deltad_prompt_cache_disk_entries", "gauge", "Saved prefixes on disk.",
         es->pc_disk_entries},
        {"deltad_prompt_cache_disk_writes_total", "counter", "Prefix files written.",
         es->pc_disk_writes},
        {"deltad_prompt_cache_disk_write_errors_total", "counter", "Prefix files not written.",
         es->pc_disk_write_errors},
        {"deltad_prompt_cache_disk_reads_total", "counter", "Prefix files read back.",
         es->pc_disk_reads},
        {"deltad_prompt_cache_disk_rejected_total", "counter",
         "Prefix files ignored when read (damaged).", es->pc_disk_rejected},
        {"deltad_prompt_cache_disk_bytes", "gauge", "Bytes of prefix files on disk.",
         es->pc_disk_bytes},
        {"deltad_prompt_cache_disk_evictions_total", "counter",
         "Prefix files deleted to stay within cache_disk_max (least recently used first).",
         es->pc_disk_evictions},
        {"deltad_prompt_cache_disk_writes_skipped_total", "counter",
         "Prefix files not written because the write queue was full.", es->pc_disk_writes_skipped},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        head(b, rows[i].name, rows[i].type, rows[i].help);
        outf(b, "%s %lld\n", rows[i].name, (long long)rows[i].v);
    }
}

/* The engine's point-in-time statistics, one row per series; tokens per second is generated
 * tokens over the seconds spent in forward steps (idle time does not dilute it). */
static void render_engine(struct dd_buf *b, const struct eng_stats *es)
{
    struct eng_stats z = {0};
    if (!es)
        es = &z;
    struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"deltad_queue_depth", "gauge", "Requests waiting for a slot.", (double)es->queue_depth},
        {"deltad_slots_active", "gauge", "Slots generating.", (double)es->active_slots},
        {"deltad_slots_total", "gauge", "Slots configured.", (double)es->n_slots},
        {"deltad_prompt_tokens_total", "counter", "Prompt tokens processed.",
         (double)es->prompt_tokens_total},
        {"deltad_generation_tokens_total", "counter", "Tokens generated.",
         (double)es->generated_tokens_total},
        {"deltad_cached_prompt_tokens_total", "counter", "Prompt tokens reused from the cache.",
         (double)es->cached_tokens_total},
        {"deltad_engine_steps_total", "counter", "Forward steps run.", (double)es->steps_total},
        {"deltad_engine_busy_seconds_total", "counter", "Seconds spent in forward steps.",
         es->busy_seconds},
        {"deltad_generation_tokens_per_second", "gauge", "Generated tokens per busy second.",
         es->busy_seconds > 0 ? (double)es->generated_tokens_total / es->busy_seconds : 0},
        {"deltad_tp_devices", "gauge",
         "Devices of the tensor-parallel group (over every mpirun rank).", (double)es->n_devices},
        {"deltad_tp_ranks", "gauge", "Processes of the mpirun job (1 without mpirun).",
         (double)es->n_ranks},
        {"deltad_allreduce_seconds_total", "counter",
         "Seconds of forward steps spent in tensor-parallel allreduces.", es->allreduce_seconds},
        {"deltad_spec_drafted_tokens_total", "counter", "Speculative draft tokens proposed.",
         (double)es->drafted_total},
        {"deltad_spec_accepted_tokens_total", "counter", "Speculative draft tokens accepted.",
         (double)es->accepted_total},
        {"deltad_spec_verify_steps_total", "counter", "Slot steps that verified a draft.",
         (double)es->verify_steps_total},
        {"deltad_sample_download_bytes_total", "counter",
         "Logits bytes downloaded from the devices for sampling and drafting (4 per greedy row "
         "whose argmax the devices take).",
         (double)es->sample_bytes_total},
        {"deltad_spec_throttles_total", "counter",
         "Times a slot stopped drafting because its acceptance did not pay for verification.",
         (double)es->spec_throttles_total},
        {"deltad_spec_probes_total", "counter",
         "One-token drafts of throttled slots, to measure acceptance again.",
         (double)es->spec_probes_total},
        {"deltad_spec_throttled_rounds_total", "counter",
         "Slot decode rounds without drafts because the slot was throttled.",
         (double)es->spec_rounds_throttled_total},
        {"deltad_spec_slots_throttled", "gauge", "Slots whose drafting is throttled now.",
         (double)es->spec_slots_throttled},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        head(b, rows[i].name, rows[i].type, rows[i].help);
        outf(b, "%s %.17g\n", rows[i].name, rows[i].v);
    }
    render_spec_positions(b, es);
    render_pcache(b, es);
}

/* Prometheus buckets are cumulative: each le bucket counts everything at or below it. */
static void render_hist(struct dd_buf *b, struct hist *h)
{
    head(b, h->name, "histogram", h->help);
    uint64_t cum = 0;
    for (size_t i = 0; i < MAX_BUCKETS && h->bound[i] > 0; i++) {
        cum += ld(&h->count[i]);
        outf(b, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bound[i], (unsigned long long)cum);
    }
    uint64_t n = ld(&h->n);
    outf(b, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)n);
    outf(b, "%s_sum %.9f\n", h->name, (double)ld(&h->sum_ns) / 1e9);
    outf(b, "%s_count %llu\n", h->name, (unsigned long long)n);
}

/* Constrained decoding (engine/sched/gram.h): counters and the compile / mask histograms. */
static void render_gram_hist(struct dd_buf *b, const char *name, const char *help,
                             const struct gram_hist *h)
{
    head(b, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < GRAM_HIST_BUCKETS; i++) {
        cum += h->count[i];
        outf(b, "%s_bucket{le=\"%g\"} %lld\n", name, gram_hist_bound[i], (long long)cum);
    }
    outf(b, "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)h->n);
    outf(b, "%s_sum %.9f\n", name, h->sum);
    outf(b, "%s_count %lld\n", name, (long long)h->n);
}

static void render_grammar(struct dd_buf *b)
{
    struct gram_stats g;
    gram_get_stats(&g);
    head(b, "deltad_constrained_requests_total", "counter",
         "Generations constrained by a grammar, a JSON schema or JSON mode.");
    outf(b, "deltad_constrained_requests_total %lld\n", (long long)g.matchers);
    head(b, "deltad_grammar_compiles_total", "counter",
         "Grammars compiled (cache misses), by result.");
    outf(b, "deltad_grammar_compiles_total{result=\"ok\"} %lld\n", (long long)g.compiles);
    outf(b, "deltad_grammar_compiles_total{result=\"error\"} %lld\n", (long long)g.compile_errors);
    head(b, "deltad_grammar_masks_total", "counter", "Token masks, by how they were computed.");
    outf(b, "deltad_grammar_masks_total{source=\"walk\"} %lld\n", (long long)g.walks);
    outf(b, "deltad_grammar_masks_total{source=\"cache\"} %lld\n", (long long)g.hits);
    render_gram_hist(b, "deltad_grammar_compile_seconds", "Time to compile one grammar.",
                     &g.compile);
    render_gram_hist(b, "deltad_grammar_mask_seconds", "Time to compute one token mask.", &g.mask);
}

/* ---- CPU time by thread group ------------------------------------------------------------- */

enum { TG_HTTP, TG_ENGINE, TG_COMPUTE, TG_OTHER, TG_N };
static const char *const tg_names[TG_N] = {"http", "engine", "compute", "other"};

/* The group of a thread by its name: libmicrohttpd's "MHD-*" threads and the job timer
 * ("deltad-http") serve HTTP and SSE; "deltad-engine" runs the scheduler (and its share of
 * the forward pass); the thread pools' workers ("deltad-cpu/N", "deltad-tp/N") compute. */
static int thread_group(const char *comm)
{
    if (strncmp(comm, "MHD-", 4) == 0 || strcmp(comm, "deltad-http") == 0)
        return TG_HTTP;
    if (strcmp(comm, "deltad-engine") == 0)
        return TG_ENGINE;
    if (strncmp(comm, "deltad-cpu", 10) == 0 || strncmp(comm, "deltad-tp", 9) == 0)
        return TG_COMPUTE;
    return TG_OTHER;
}

/* CPU seconds of thread `tid` of this process: the scheduler's nanosecond count
 * (/proc/.../schedstat), else utime + stime in clock ticks (/proc/.../stat). */
static double thread_cpu(const char *tid)
{
    char path[320], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", tid);
    FILE *f = fopen(path, "r");
    unsigned long long ns;
    if (f) {
        int ok = fscanf(f, "%llu", &ns) == 1;
        fclose(f);
        if (ok)
            return (double)ns * 1e-9;
    }
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
    if (!(f = fopen(path, "r")))
        return 0.0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces: fields follow its ')' */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0.0;
    long hz = sysconf(_SC_CLK_TCK);
    return (double)(ut + st) / (double)(hz > 0 ? hz : 100);
}

/* deltad_thread_cpu_seconds_total{group}: the live threads' CPU time by group (threads that
 * ended are not counted). HTTP + SSE work against the engine's: group http against engine +
 * compute (tools/http_bench.py prints the ratio). */
static void render_threads(struct dd_buf *b)
{
    double sec[TG_N] = {0};
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char path[320], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(comm, sizeof comm, f))
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        sec[thread_group(comm)] += thread_cpu(de->d_name);
    }
    if (d)
        closedir(d);
    head(b, "deltad_thread_cpu_seconds_total", "counter",
         "CPU seconds of the daemon's live threads by group: http (HTTP and SSE), engine (the "
         "scheduler thread), compute (forward-pass workers), other.");
    for (int g = 0; g < TG_N; g++)
        outf(b, "deltad_thread_cpu_seconds_total{group=\"%s\"} %.6f\n", tg_names[g], sec[g]);
}

char *metrics_render(metrics_t *m, const struct eng_stats *es, size_t *len)
{
    struct dd_buf b = {0};
    render_requests(&b, m);
    render_engine(&b, es);
    render_threads(&b);
    render_hist(&b, &m->ttft);
    render_hist(&b, &m->itl);
    render_hist(&b, &m->e2e);
    render_grammar(&b);
    return dd_buf_take(&b, len);
}
