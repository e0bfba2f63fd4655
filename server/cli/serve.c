/*
 * serve — the daemon's life cycle (see serve.h): start-up in a fixed order, the main thread's
 * signal and watchdog loop, the drain on SIGTERM, and teardown in reverse order.
 *
 * Signals: SIGTERM, SIGINT and SIGHUP are blocked in every thread; the main thread unblocks
 * them only inside pselect() (and while the model loads, and during the drain), so handlers run
 * on the main thread at known points and never race with thread creation. The handler only
 * bumps the counters below, except where exiting at once is the point (a stop before READY, a
 * second SIGINT).
 *
 * Logging: one sink (set with dd_log_set) writes every line to stderr or the log file under a
 * mutex, either with a UTC timestamp or with a <N> syslog-priority prefix that journald turns
 * into the line's priority. Request ids are part of the messages of the HTTP layer.
 *
 * Watchdog: with WATCHDOG_USEC set, the main thread pings at half the period, but only while
 * the engine is idle or its step counter moved since the last ping, so a hung forward step
 * stops the pings and systemd restarts the daemon.
 */
#include "serve.h" // defines: serve_main

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/compute/dev_cuda.h" // defines: dev_cuda_built
#include "engine/compute/device.h"   // defines: dev_group_create
#include "engine/compute/dist.h"     // defines: dist_size, dist_interrupt, dist_broken
#include "engine/model/model.h"      // defines: model_load
#include "engine/sched/eng.h"        // defines: eng_create, eng_get_stats
#include "engine/util.h"             // defines: LOG_I, dd_log_set
#include "server/api/chat.h"         // defines: chat_tmpl_create
#include "server/config/cfg.h"       // defines: cfg_load, cfg_get
#include "server/http/http.h"        // defines: http_start, http_attach
#include "server/http/sdnotify.h"    // defines: sdnotify_ready

/* The shutdown flag of STYLE rule 26 and its two companions; written by the handler. */
static volatile sig_atomic_t g_stops;   /* SIGTERM/SIGINT received */
static volatile sig_atomic_t g_hups;    /* SIGHUP received (only ever grows) */
static volatile sig_atomic_t g_serving; /* main thread: READY reached, a stop now drains */

struct serve_log {
    pthread_mutex_t mu; /* guards f: SIGHUP swaps it while other threads log */
    FILE *f;            /* stderr, or the log file (owned) */
    const char *path;   /* log_file, or NULL for stderr; borrowed from the frozen config */
    bool syslog;        /* <N> prefixes instead of timestamps */
};

struct serve {
    int argc;
    char **argv;           /* borrowed: the arguments after "serve", re-read on SIGHUP */
    const struct cfg *cfg; /* the frozen config */
    struct serve_log log;
    http_t *http; /* owned, from here down: released by teardown in reverse order */
    struct model *model;
    chat_tmpl_t *chat; /* the model's chat template, compiled once */
    struct dev *devs[64];
    int n_dev;
    eng_t *eng;
    uint64_t wd_usec; /* systemd watchdog period, 0 = none */
    double wd_next;   /* dd_now() of the next ping */
    int64_t wd_steps; /* engine steps at the last ping */
};

/* ============================================================================================
 * Logging
 * ========================================================================================== */

/* The dd_log callback: one line per message, written and flushed under the mutex so lines of
 * different threads never interleave and a crash loses nothing already logged. Called from any
 * thread; the timestamp is formatted before taking the lock to keep the critical section short. */
static void log_sink(enum dd_log_level lvl, const char *func, const char *msg, void *ud)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    static const int prio[] = {3, 4, 6, 7};
    struct serve_log *l = ud;
    char ts[40] = "";
    if (!l->syslog) {
        struct timespec now;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(ts + n, sizeof ts - n, ".%03ldZ ", now.tv_nsec / 1000000);
    }
    pthread_mutex_lock(&l->mu);
    if (l->syslog)
        fprintf(l->f, "<%d>%s %s: %s\n", prio[lvl], names[lvl], func, msg);
    else
        fprintf(l->f, "%s%s %s: %s\n", ts, names[lvl], func, msg);
    fflush(l->f);
    pthread_mutex_unlock(&l->mu);
}

/* journald connected our stderr when $JOURNAL_STREAM names stderr's device and inode. */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* Choose the sink: the log file when log_file is set (opened for append, close-on-exec), else
 * stderr; syslog prefixes when asked for, or under journald with log_format = auto. */
static int log_open(struct serve_log *l, const struct cfg *c, char *err, size_t errlen)
{
    pthread_mutex_init(&l->mu, NULL);
    l->f = stderr;
    l->path = *c->log_file ? c->log_file : NULL;
    l->syslog = c->log_format == CFG_LOG_SYSLOG ||
                (c->log_format == CFG_LOG_AUTO && !l->path && stderr_is_journal());
    if (!l->path)
        return 0;
    l->f = fopen(l->path, "ae");
    if (!l->f) {
        char where[512];
        dd_errf(err, errlen,
                "%s: key 'log_file': cannot open '%s': %s\nHINT: the directory "
                "must exist and be writable by the daemon's user",
                cfg_where(c, "log_file", where, sizeof where), l->path, strerror(errno));
        l->f = stderr;
        return DD_EIO;
    }
    return 0;
}

/* SIGHUP: logrotate moved the file away; start a new one at the configured path. */
static void log_reopen(struct serve_log *l)
{
    if (!l->path) {
        LOG_I("SIGHUP: logging to stderr, nothing to reopen");
        return;
    }
    FILE *f = fopen(l->path, "ae");
    if (!f) {
        LOG_E("SIGHUP: cannot reopen log file '%s': %s; still writing to the old one", l->path,
              strerror(errno));
        return;
    }
    pthread_mutex_lock(&l->mu);
    FILE *old = l->f;
    l->f = f;
    pthread_mutex_unlock(&l->mu);
    fclose(old);
    LOG_I("SIGHUP: log file '%s' reopened", l->path);
}

static void log_close(struct serve_log *l)
{
    dd_log_set(NULL, NULL);
    if (l->f && l->f != stderr)
        fclose(l->f);
    pthread_mutex_destroy(&l->mu);
}

/* A start-up failure (tier 18b): every line as an error in the log, and on stderr as well when
 * the log is a file, so whoever started the daemon by hand sees it. */
static void startup_failed(const struct serve *s, const char *msg)
{
    for (const char *p = msg; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != '\0'))
        LOG_E("%.*s", (int)strcspn(p, "\n"), p);
    if (s->log.path)
        fprintf(stderr, "deltad: error: %s\n", msg);
}

/* ============================================================================================
 * Signals
 * ========================================================================================== */

static void on_signal(int sig)
{
    if (sig == SIGHUP) {
        g_hups++;
        return;
    }
    if (!g_serving) {
        static const char msg[] = "deltad: stop requested during start-up; exiting\n";
        ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)n;
        _exit(0);
    }
    if (g_stops && sig == SIGINT)
        _exit(130); /* the second Ctrl-C: do not wait for the drain */
    if (dist_size() > 1)
        dist_interrupt(); /* mpirun's SIGKILL follows within seconds: no drain (README) */
    g_stops++;
}

/* Block or unblock SIGTERM, SIGINT and SIGHUP in the calling thread. */
static void signals_mask(int how)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(how, &set, NULL);
}

/* Block the three signals (every thread created from now on inherits the mask), install the
 * handler, and ignore SIGPIPE (a client gone mid-write is an error return, not a death). */
static void signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGHUP);
    signals_mask(SIG_BLOCK);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ============================================================================================
 * Start-up
 * ========================================================================================== */

/* The HTTP layer's options from the config. Strings are borrowed from the frozen config, which
 * lives until exit; "" becomes NULL where http.h means "off". */
static void http_opts_from(const struct cfg *c, struct http_opts *o)
{
    *o = (struct http_opts){
        .host = c->host,
        .port = (int)c->port,
        .threads = (int)c->http_threads,
        .api_key = *c->api_key ? c->api_key : NULL,
        .auth_metrics = c->auth_metrics,
        .max_conns = (int)c->max_conns,
        .idle_timeout_s = (int)c->idle_timeout,
        .receive_timeout_s = c->receive_timeout,
        .max_body = (size_t)c->max_body,
        .max_json_depth = (int)c->max_json_depth,
        .cors_origin = *c->cors_origin ? c->cors_origin : NULL,
        .model_name = c->model_name,
        .max_tokens_default = c->max_tokens_default,
        .n_slots = c->slots,
        .request_timeout_s = c->request_timeout,
        .metrics_enabled = c->metrics,
        .slots_enabled = c->slots_endpoint,
        .queue_full_status = (int)c->queue_full_status,
        .retry_after_s = (int)c->retry_after,
        .n_ctx = c->ctx,
        .reasoning_format = c->reasoning_format,
        .responses_store_max = c->responses_store_max,
        .responses_store_ttl_s = c->responses_store_ttl,
    };
}

/* Append "\nHINT: ..." naming where the key was set to the message already in err. */
static void add_hint(const struct cfg *c, const char *key, const char *hint, char *err,
                     size_t errlen)
{
    char where[512];
    size_t len = strlen(err);
    snprintf(err + len, errlen - len, "\nHINT: %s (key '%s', %s)", hint, key,
             cfg_where(c, key, where, sizeof where));
}

/* The model file, mmapped and validated. Signals are open meanwhile: loading a large model
 * from a cold disk can take minutes, and `systemctl stop` must not wait for it. */
static int load_model(struct serve *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    sdnotify_sendf("STATUS=loading %s", c->model);
    LOG_I("loading model %s", c->model);
    double t0 = dd_now();
    signals_mask(SIG_UNBLOCK); /* a stop while loading exits at once */
    int rc = model_load(c->model, &s->model, err, errlen);
    signals_mask(SIG_BLOCK);
    if (rc) {
        add_hint(c, "model",
                 "check the path and that this user may read the file; the archs "
                 "served are qwen3, qwen35, qwen35moe and qwen3next",
                 err, errlen);
        return rc;
    }
    LOG_I("model %s: arch %s, %lld layers, vocab %lld, %.1f MiB of weights, %.2f s", c->model_name,
          model_arch_name(s->model->hp.arch), (long long)s->model->hp.n_layer,
          (long long)s->model->hp.n_vocab, s->model->weight_bytes / 1048576.0, dd_now() - t0);
    if (s->model->hp.n_ctx_train > 0 && c->ctx > s->model->hp.n_ctx_train)
        LOG_W("ctx %lld exceeds the model's training context %lld; quality may drop past it",
              (long long)c->ctx, (long long)s->model->hp.n_ctx_train);
    return 0;
}

/* The chat template, compiled once: chat_template_file, else the GGUF's, else ChatML. A syntax
 * error stops start-up naming the file it came from. */
static int load_template(struct serve *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    int rc = chat_tmpl_create(s->model, c->chat_template_file, &s->chat, err, errlen);
    if (rc) {
        bool file = *c->chat_template_file;
        add_hint(c, file ? "chat_template_file" : "model",
                 file ? "fix the template file, or set chat_template_file = \"\" to use the "
                        "model's own"
                      : "the GGUF's tokenizer.chat_template does not compile; point "
                        "chat_template_file at a working template",
                 err, errlen);
        return rc;
    }
    LOG_I("chat template: %s", chat_tmpl_source(s->chat));
    return 0;
}

/* The devices (devices = cpu:N with hwloc placement, or cuda:...). A CPU group binds the
 * calling thread to device 0's first core, so the engine thread started next inherits that
 * placement; a GPU's driving thread binds near it at its first step. */
static int build_devices(struct serve *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    const struct dev_spec *sp = &c->dev_spec;
    int rc =
        dev_group_create(sp, (int)c->threads, c->bind_threads, s->devs, &s->n_dev, err, errlen);
    if (rc) {
        add_hint(c, "devices",
                 sp->cuda ? "name GPUs this machine has (nvidia-smi lists them)"
                          : "use at most as many CPU devices as allowed cores",
                 err, errlen);
        return rc;
    }
    const int n = s->n_dev;
    if (sp->cuda)
        LOG_I("%d GPU%s (%s)", n, n > 1 ? "s, tensor parallel over NCCL" : "", c->devices);
    else
        LOG_I("%d CPU device%s, %d threads each%s", n, n > 1 ? "s (tensor parallel)" : "",
              dev_n_threads(s->devs[0]), c->bind_threads ? ", bound with hwloc" : "");
    return 0;
}

static unsigned spec_mask(int t)
{
    static const unsigned m[] = {0, ENG_SPEC_NGRAM, ENG_SPEC_MTP, ENG_SPEC_NGRAM | ENG_SPEC_MTP};
    return m[t];
}

/* MemAvailable of /proc/meminfo in bytes, or 0 when it cannot be read. */
static int64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    fclose(f);
    return (int64_t)kib * 1024;
}

/* The start-up memory budget: the per-slot state must fit cache_mem_max, or by default the
 * memory available now. Logs the estimate either way. */
static int check_memory(struct serve *s, const struct eng_params *p, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    struct eng_mem u;
    eng_mem_estimate(s->model, p, &u);
    int64_t limit = c->cache_mem_max ? c->cache_mem_max : mem_available();
    const char *name = c->cache_mem_max ? "cache_mem_max" : "the available memory (MemAvailable)";
    LOG_I("caches: %.1f MiB (KV %.1f, MTP KV %.1f, GDN state %.1f + snapshots %.1f, "
          "checkpoints %.1f); limit %.1f MiB (%s); activations %.1f MiB",
          u.total / 1048576.0, u.kv / 1048576.0, u.mtp_kv / 1048576.0, u.gdn / 1048576.0,
          u.snapshots / 1048576.0, u.ckpts / 1048576.0, limit / 1048576.0,
          limit ? name : "none: MemAvailable unknown", u.act / 1048576.0);
    int rc = eng_mem_check(s->model, p, limit, name, err, errlen);
    if (rc)
        add_hint(c, c->cache_mem_max ? "cache_mem_max" : "slots",
                 "lower slots, ctx, "
                 "spec_draft_max or checkpoints, or raise cache_mem_max",
                 err, errlen);
    return rc;
}

void serve_eng_params(const struct cfg *c, struct eng_params *p)
{
    int64_t draft = c->spec_type ? c->spec_draft_max : 0;
    if (draft > c->max_batch_tokens - 1)
        draft = c->max_batch_tokens - 1; /* the verification batch holds the draft + 1 */
    *p = (struct eng_params){
        .n_slots = c->slots,
        .n_ctx = c->ctx,
        .max_batch_tokens = c->max_batch_tokens,
        .queue_max = c->queue_max,
        .n_checkpoints = c->checkpoints,
        .checkpoint_every = c->checkpoint_every,
        .cache_ram_max = c->cache_ram_max,
        .cache_dir = c->cache_dir,
        .cache_disk_max = c->cache_disk_max,
        .spec_types = draft > 0 ? spec_mask(c->spec_type) : 0,
        .draft_max = draft,
        .ngram_n = c->spec_ngram_n,
        .ngram_min = c->spec_ngram_min,
        .ngram_max_draft = c->spec_ngram_max,
        .mtp_p_min = (float)c->spec_p_min,
        .spec_rollback = c->spec_rollback == CFG_ROLLBACK_RECOMPUTE ? ENG_ROLLBACK_RECOMPUTE
                                                                    : ENG_ROLLBACK_SNAPSHOT,
        .no_graphs = !c->cuda_graphs,
    };
}

/* The engine with its caches sized from the config (allocated here, once), and its thread. */
static int build_engine(struct serve *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    struct eng_params p;
    serve_eng_params(c, &p);
    if (c->spec_type && p.draft_max < c->spec_draft_max)
        LOG_W("spec_draft_max %lld does not fit max_batch_tokens %lld: drafts of %lld at most",
              (long long)c->spec_draft_max, (long long)c->max_batch_tokens, (long long)p.draft_max);
    int rc = check_memory(s, &p, err, errlen);
    if (rc)
        return rc;
    if (c->spec_rollback == CFG_ROLLBACK_RECOMPUTE && p.spec_types)
        LOG_W("spec_rollback = recompute: a debug mode, rejected drafts are re-run");
    if (dist_size() > 1)
        LOG_I("mpirun job: rank 0 of %d on %s; waiting for the workers' shards", dist_size(),
              dist_host());
    rc = eng_create_group(s->model, s->devs, s->n_dev, &p, &s->eng, err, errlen);
    if (rc) {
        add_hint(c, "slots",
                 "the caches did not fit; lower slots, ctx, spec_draft_max or "
                 "max_batch_tokens",
                 err, errlen);
        return rc;
    }
    if (dist_size() > 1) {
        struct eng_stats st;
        eng_get_stats(s->eng, &st);
        LOG_I("tensor parallel over %lld devices on %lld mpirun ranks (rank 0 serves HTTP)",
              (long long)st.n_devices, (long long)st.n_ranks);
    }
    return eng_start(s->eng, err, errlen);
}

/* Start-up in the order of serve.h. The listener comes first so load balancers and systemd see
 * a live process answering 503 during a long load, instead of a refused connection. */
static int start(struct serve *s, char *err, size_t errlen)
{
    const struct cfg *c = s->cfg;
    struct http_opts ho;
    http_opts_from(c, &ho);
    int rc = http_start(&ho, &s->http, err, errlen);
    if (rc) {
        add_hint(c, "port",
                 "is another process listening there (ss -ltnp)? ports below 1024 "
                 "need privileges",
                 err, errlen);
        return rc;
    }
    LOG_I("listening on %s port %d (loading: /health answers 503 until ready)", c->host,
          http_port(s->http));
    if ((rc = load_model(s, err, errlen)) || (rc = load_template(s, err, errlen)) ||
        (rc = build_devices(s, err, errlen)) || (rc = build_engine(s, err, errlen)))
        return rc;
    http_attach(s->http, s->eng, s->model, s->chat);
    g_serving = 1;
    char status[512];
    snprintf(status, sizeof status, "serving %s on %s:%d, %lld slots of %lld tokens", c->model_name,
             c->host, http_port(s->http), (long long)c->slots, (long long)c->ctx);
    sdnotify_ready(status);
    LOG_I("ready: %s", status);
    return 0;
}

/* ============================================================================================
 * Running: signals, SIGHUP, watchdog
 * ========================================================================================== */

/* SIGHUP: reopen the log, re-read the configuration with the same arguments, apply the
 * [runtime] keys (the log level) and report the keys that need a restart. */
static void on_hup(struct serve *s)
{
    struct cfg fresh;
    char err[2048];
    log_reopen(&s->log);
    if (cfg_load(&fresh, s->argc, s->argv, stderr, err, sizeof err) == 0) {
        if (cfg_report_changes(s->cfg, &fresh) == 0)
            LOG_I("SIGHUP: configuration unchanged");
        dd_log_level = fresh.log_level;
    } else {
        for (char *p = err; *p; p++)
            *p = *p == '\n' ? ' ' : *p;
        LOG_E("SIGHUP: configuration not reloaded: %s", err);
    }
    cfg_free(&fresh);
}

/* The engine is alive when its loop counter moved since the last check: the loop turns after
 * every step and at least once a second while idle. */
static bool engine_alive(struct serve *s)
{
    struct eng_stats st;
    eng_get_stats(s->eng, &st);
    bool moved = st.loops_total != s->wd_steps;
    s->wd_steps = st.loops_total;
    return moved;
}

static void watchdog_tick(struct serve *s)
{
    double now = dd_now();
    if (!s->wd_usec || now < s->wd_next)
        return;
    s->wd_next = now + (double)s->wd_usec / 2e6;
    if (engine_alive(s))
        sdnotify_watchdog();
    else
        LOG_W("engine made no step in %.1f s with work pending; watchdog ping withheld",
              (double)s->wd_usec / 2e6);
}

/* Sleep in pselect (the only place the signals are unblocked) until a stop signal. */
static void run(struct serve *s)
{
    sigset_t open;
    pthread_sigmask(SIG_SETMASK, NULL, &open);
    sigdelset(&open, SIGTERM);
    sigdelset(&open, SIGINT);
    sigdelset(&open, SIGHUP);
    s->wd_usec = sdnotify_watchdog_usec();
    if (s->wd_usec)
        LOG_I("systemd watchdog: %.1f s, pinging every %.1f s", (double)s->wd_usec / 1e6,
              (double)s->wd_usec / 2e6);
    sig_atomic_t hups_seen = g_hups;
    while (!g_stops && !dist_broken()) {
        double wait = s->wd_usec ? s->wd_next - dd_now() : 1.0;
        wait = wait < 0 ? 0 : wait > 1.0 ? 1.0 : wait;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        pselect(0, NULL, NULL, NULL, &ts, &open);
        if (g_hups != hups_seen) {
            hups_seen = g_hups;
            on_hup(s);
        }
        watchdog_tick(s);
    }
}

/* Sleep in 10 ms steps until no generation request is in flight or dd_now() passes until. */
static void wait_requests(struct serve *s, double until)
{
    struct timespec tick = {0, 10 * 1000 * 1000};
    while (http_active_requests(s->http) > 0 && dd_now() < until)
        nanosleep(&tick, NULL);
}

/* SIGTERM, in the order http.h asks for: refuse new work (503), let requests in flight finish
 * for up to drain_timeout, then stop the engine, which cancels whatever is left and joins its
 * thread, and give the HTTP threads a moment to send those cancelled requests' last bytes. */
static void drain(struct serve *s)
{
    const struct cfg *c = s->cfg;
    double t0 = dd_now();
    if (dist_broken())
        LOG_E("the tensor-parallel job is broken (%s): failing the requests in flight with "
              "503 and exiting 1",
              dist_failure());
    LOG_I("stopping: draining %lld in-flight requests for up to %g s",
          (long long)http_active_requests(s->http), c->drain_timeout);
    sdnotify_stopping("draining");
    http_set_draining(s->http);
    signals_mask(SIG_UNBLOCK); /* from here a second SIGINT exits at once */
    wait_requests(s, t0 + c->drain_timeout);
    int64_t left = http_active_requests(s->http);
    eng_stop(s->eng, 0.0);
    wait_requests(s, dd_now() + 2.0);
    LOG_I("drained in %.2f s (%lld requests cancelled at the deadline)", dd_now() - t0,
          (long long)left);
}

/* Release in reverse order of creation; every step accepts what start() did not get to. The
 * engine thread is joined (eng_destroy) before the device and the model it uses go away. */
static void teardown(struct serve *s)
{
    if (s->http)
        http_stop(s->http);
    eng_destroy(s->eng);
    for (int d = 0; d < s->n_dev; d++)
        dev_destroy(s->devs[d]);
    chat_tmpl_destroy(s->chat);
    model_free(s->model);
}

/* Memory that stays flat under load, as the daemon ships (make run, the systemd units): with
 * glibc's defaults every HTTP thread gets a malloc arena of its own, and the mmap threshold
 * rises after each large request body is freed, so freed memory stays cached per thread and
 * RssAnon drifts up by several MiB under load before it levels off (+13 % over 120 s of the
 * load test). One arena (the engine thread's work is not malloc-bound) and a fixed 128 KiB mmap
 * threshold keep it flat. The environment variables glibc reads still win: with
 * MALLOC_ARENA_MAX or MALLOC_MMAP_THRESHOLD_ set, malloc is left to them entirely. */
static void malloc_settings(void)
{
#ifdef __GLIBC__
    if (getenv("MALLOC_ARENA_MAX") || getenv("MALLOC_MMAP_THRESHOLD_"))
        return;
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

/* The spine: config, logging, start, run until a stop signal, drain, teardown. Exit status 2
 * for a config problem, 1 for any other start-up failure, 0 after a stop. */
int serve_main(int n, char **args)
{
    struct serve s = {.argc = n, .argv = args};
    char err[4096];
    malloc_settings(); /* before any thread starts */
    int rc = cfg_load(cfg_mut(), n, args, stdout, err, sizeof err);
    if (rc == 1)
        return 0; /* --help */
    if (rc) {
        fprintf(stderr, "deltad: error: %s\n", err);
        return 2;
    }
    cfg_freeze();
    s.cfg = cfg_get();
    dist_set_timeout(s.cfg->mpi_timeout);
    if (s.cfg->dev_spec.cuda && !dev_cuda_built()) {
        fprintf(stderr,
                "deltad: error: key 'devices': '%s': this build has no CUDA (rebuild with make "
                "CUDA=1)\nHINT: devices = cpu:N\n",
                s.cfg->devices);
        return 2;
    }
    if (log_open(&s.log, s.cfg, err, sizeof err)) {
        fprintf(stderr, "deltad: error: %s\n", err);
        return 2;
    }
    dd_log_set(log_sink, &s.log);
    dd_log_level = s.cfg->log_level;
    LOG_I("deltad serve starting, pid %ld", (long)getpid());
    cfg_dump(s.cfg);
    signals_install();
    rc = start(&s, err, sizeof err);
    if (rc) {
        startup_failed(&s, err);
        teardown(&s);
        log_close(&s.log);
        return 1;
    }
    run(&s);
    drain(&s);
    teardown(&s);
    rc = dist_broken() ? 1 : 0;
    LOG_I("stopped%s", rc ? " (the tensor-parallel job broke)" : "");
    log_close(&s.log);
    return rc;
}
