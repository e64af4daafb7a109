/* Test program of keyed C-ABI groups under attack (run by capi/tests/c_abi_key.rs, one copy
 * per test-bed host, with a hostile host on the segment).
 *
 * The group is opened with the default options, so its key comes from ETHBCAST_KEY_FILE as an
 * MPI job's would. Each round, rank 0 enters a barrier 300 ms late, then broadcasts 64 bytes
 * after another 300 ms pause: a forged barrier release would let the others out early, and a
 * forged data message would reach their buffers before the root's. Prints
 * "rank R size N keyed K early E corrupt C errors X" (whether the group has a key, barriers
 * left early, broadcasts with wrong bytes, failed calls) and exits 0; exits 1 if the group cannot be opened. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ethbcast.h"

#define ROUNDS 6
#define LEN 64

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static uint8_t pattern(int round, int i) { return (uint8_t)(round * 37 + i * 11 + 1); }

int main(int argc, char **argv) {
    const char *iface = argc > 1 ? argv[1] : "eth0";
    ethbcast_options_t opts;
    ethbcast_options_default(&opts);
    opts.wait = ETHBCAST_WAIT_BLOCK;
    opts.timeout_ms = 20000;
    ethbcast_group_t *g = NULL;
    int rc = ethbcast_open(iface, &opts, &g);
    if (rc != ETHBCAST_OK) {
        fprintf(stderr, "open: %s [%s]\n", ethbcast_strerror(rc), ethbcast_last_error());
        return 1;
    }
    int me = ethbcast_rank(g), n = ethbcast_size(g), keyed = ethbcast_keyed(g);
    int early = 0, corrupt = 0, errors = 0;
    uint8_t buf[LEN];
    for (int round = 0; round < ROUNDS; round++) {
        if (me == 0)
            pause_ms(300);
        double t0 = now_ms();
        rc = ethbcast_barrier(g);
        double waited = now_ms() - t0;
        if (rc != ETHBCAST_OK) {
            fprintf(stderr, "rank %d: barrier %d: %s [%s]\n", me, round, ethbcast_strerror(rc),
                    ethbcast_last_error());
            errors++;
        } else if (me != 0 && waited < 150.0) {
            fprintf(stderr, "rank %d: barrier %d returned after %.1f ms\n", me, round, waited);
            early++;
        }
        if (me == 0)
            pause_ms(300);
        for (int i = 0; i < LEN; i++)
            buf[i] = me == 0 ? pattern(round, i) : 0;
        rc = ethbcast_bcast(g, 0, buf, LEN);
        if (rc != ETHBCAST_OK) {
            fprintf(stderr, "rank %d: bcast %d: %s [%s]\n", me, round, ethbcast_strerror(rc),
                    ethbcast_last_error());
            errors++;
            continue;
        }
        for (int i = 0; i < LEN; i++)
            if (buf[i] != pattern(round, i)) {
                fprintf(stderr, "rank %d: bcast %d: byte %d is %u, want %u\n", me, round, i,
                        buf[i], pattern(round, i));
                corrupt++;
                break;
            }
    }
    if (ethbcast_barrier(g) != ETHBCAST_OK)
        errors++;
    if (ethbcast_close(g) != ETHBCAST_OK)
        errors++;
    printf("rank %d size %d keyed %d early %d corrupt %d errors %d\n", me, n, keyed, early,
           corrupt, errors);
    return 0;
}
