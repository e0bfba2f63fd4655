/*
 * dev_spec — the devices key's syntax (contract in device.h, dev_spec_parse): cpu:N,
 * cuda:I[,J...] or cuda:all. Syntax only, in every build: whether this build has CUDA is
 * dev_cuda_built's to say (the daemon and the subcommands refuse cuda specs without it at
 * start-up, exit 2), and which GPUs exist is dev_group_create's.
 */
#include <stdlib.h>
#include <string.h>

#include "device.h"      // defines: struct dev_spec, dev_spec_parse
#include "engine/util.h" // defines: dd_errf

/* A decimal in [lo, hi] from *p up to a ',' or the end; advances *p. */
static int parse_int(const char **p, int lo, int hi, int *v)
{
    char *end;
    long x = strtol(*p, &end, 10);
    if (end == *p || (*end && *end != ',') || x < lo || x > hi || **p == '-' || **p == '+' ||
        **p == ' ')
        return -1;
    *v = (int)x;
    *p = end;
    return 0;
}

int dev_spec_parse(const char *s, struct dev_spec *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    const char *p = s;
    if (strncmp(s, "cpu:", 4) == 0) {
        p += 4;
        if (parse_int(&p, 1, DEV_GROUP_MAX, &out->n) || *p) {
            dd_errf(msg, cap, "expected cpu:N with N from 1 to %d, got '%s'", DEV_GROUP_MAX, s);
            return DD_EINVAL;
        }
        return 0;
    }
    if (strncmp(s, "cuda:", 5) != 0) {
        dd_errf(msg, cap, "expected cpu:N, cuda:I[,J...] or cuda:all, got '%s'", s);
        return DD_EINVAL;
    }
    out->cuda = true;
    p += 5;
    if (strcmp(p, "all") == 0) {
        out->all = true;
        return 0;
    }
    while (1) {
        int g;
        if (out->n == DEV_GROUP_MAX || parse_int(&p, 0, 1023, &g)) {
            dd_errf(msg, cap,
                    "expected cuda:all or cuda: and up to %d distinct GPU ordinals separated by "
                    "commas (cuda:0,1), got '%s'",
                    DEV_GROUP_MAX, s);
            return DD_EINVAL;
        }
        for (int i = 0; i < out->n; i++)
            if (out->gpu[i] == g) {
                dd_errf(msg, cap, "'%s' names GPU %d twice", s, g);
                return DD_EINVAL;
            }
        out->gpu[out->n++] = g;
        if (!*p)
            return 0;
        p++; /* the comma */
    }
}
