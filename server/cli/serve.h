/*
 * serve — `deltad serve [--config FILE] [--key value ...]`: the daemon's life cycle.
 *
 * Start-up order: configuration (cfg), logging, the HTTP listener in LOADING state (/health
 * answers 503), the model, the hwloc placement, the CPU device, the engine; then the HTTP layer
 * is attached to the engine (READY) and systemd hears READY=1. Any failure before READY prints
 * the file or key, the value and a HINT line and exits non-zero (STYLE rule 18b).
 *
 * Signals: SIGTERM / SIGINT drain (STOPPING=1, new requests get 503, running requests finish
 * for up to drain_timeout, then exit 0); a second SIGINT exits at once; SIGHUP reopens the log
 * file and re-reads the configuration, applying the [runtime] keys. Before READY a stop signal
 * exits at once (there is nothing to drain).
 *
 * Threads: serve_main runs on the main thread, which afterwards only waits for signals and
 * sends the systemd watchdog pings.
 */
#ifndef DELTAD_SERVE_H
#define DELTAD_SERVE_H

#include "engine/sched/eng.h"  // defines: struct eng_params
#include "server/config/cfg.h" // defines: struct cfg

/* Run the daemon with the arguments after "serve" (args[0..n)). Returns the process exit
 * status: 0 after a clean stop (or --help), 1 for a start-up failure, 2 for a config error. */
int serve_main(int n, char **args);

/* The engine parameters of config c: slots, ctx, batch, checkpoints, the prompt cache's tiers
 * and speculation, the draft clamped to max_batch_tokens - 1. Shared with `deltad generate`,
 * which runs the same engine. p->cache_dir points into c (valid while c is). */
void serve_eng_params(const struct cfg *c, struct eng_params *p);

#endif
