/* Test program of the C ABI (run by capi/tests/c_abi.rs, one copy per test-bed host).
 *
 * Every member takes every rank as root in turn, for lengths 0 B to 64 KiB, and checks every
 * received byte against the pattern the root wrote; 200 back-to-back broadcasts of one root
 * far ahead of its receivers; then a barrier, a deliberately wrong
 * length (must give ETHBCAST_ERR_LENGTH at the receivers), the counters, 300 ms away from
 * the library with nothing in flight (the progress thread must not keep looking), and close.
 * Prints "ok rank R size N bcasts B" on success; exits 1 with a reason otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ethbcast.h"

static uint8_t pattern(int root, size_t len, size_t i) {
    return (uint8_t)(root * 131u + len * 7u + i * 29u + (i >> 8));
}

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, " [%s]\n", ethbcast_last_error());                                 \
        return 1;                                                                          \
    } while (0)

/* Errors that need no group: each must give its code and a sentence, never a crash. */
static int errors_check(const char *iface) {
    int rc = ethbcast_probe("ebc-nosuch0");
    if (rc != ETHBCAST_ERR_NO_INTERFACE)
        FAIL("probe of a missing interface gave %d", rc);
    if (strstr(ethbcast_last_error(), "ebc-nosuch0") == NULL)
        FAIL("the last error does not name the interface");
    ethbcast_group_t *g = NULL;
    if (ethbcast_open(NULL, NULL, &g) != ETHBCAST_ERR_INVALID || g != NULL)
        FAIL("open(NULL) accepted");
    ethbcast_options_t opts;
    ethbcast_options_default(&opts);
    opts.wait = 77;
    if (ethbcast_open(iface, &opts, &g) != ETHBCAST_ERR_INVALID || g != NULL)
        FAIL("wait mode 77 accepted");
    /* No rank or size in the environment (the test clears it). */
    rc = ethbcast_open(iface, NULL, &g);
    if (rc != ETHBCAST_ERR_MEMBERSHIP || g != NULL)
        FAIL("open without rank/size in the environment gave %d", rc);
    if (strstr(ethbcast_last_error(), "ETHBCAST_RANK") == NULL)
        FAIL("the last error does not say where rank and size come from");
    if (strcmp(ethbcast_strerror(-1000), "unknown error code") != 0)
        FAIL("strerror of an unknown code");
    if (ethbcast_close(NULL) != ETHBCAST_OK || ethbcast_rank(NULL) != -1)
        FAIL("NULL handle");
    printf("ok errors\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--errors") == 0)
        return errors_check(argc > 2 ? argv[2] : "eth0");
    const char *iface = argc > 1 ? argv[1] : "eth0";
    ethbcast_options_t opts;
    ethbcast_options_default(&opts);
    opts.wait = ETHBCAST_WAIT_BLOCK;
    opts.timeout_ms = 20000;
    ethbcast_group_t *g = NULL;
    int rc = ethbcast_open(iface, &opts, &g);
    if (rc != ETHBCAST_OK)
        FAIL("open: %s", ethbcast_strerror(rc));
    int me = ethbcast_rank(g), n = ethbcast_size(g);
    const size_t lens[] = {0, 1, 8, 256, 1459, 1460, 4096, 65536};
    size_t nlens = sizeof lens / sizeof lens[0];
    uint8_t *buf = malloc(65536 + 1);
    uint64_t expected_bytes_in = 0, bcasts = 0;
    for (int root = 0; root < n; root++) {
        for (size_t k = 0; k < nlens; k++) {
            size_t len = lens[k];
            for (size_t i = 0; i < len; i++)
                buf[i] = me == root ? pattern(root, len, i) : (uint8_t)~pattern(root, len, i);
            rc = ethbcast_bcast(g, root, len ? buf : NULL, len);
            if (rc != ETHBCAST_OK)
                FAIL("rank %d: bcast root %d len %zu: %s", me, root, len, ethbcast_strerror(rc));
            for (size_t i = 0; i < len; i++)
                if (buf[i] != pattern(root, len, i))
                    FAIL("rank %d: root %d len %zu: byte %zu is %u, want %u", me, root, len, i,
                         buf[i], pattern(root, len, i));
            if (me != root)
                expected_bytes_in += len;
            bcasts++;
        }
    }
    /* A root far ahead of its receivers: 200 back-to-back 8-byte broadcasts from the last
     * rank (MPI lets the root return at once; the receivers must still get each in order). */
    for (int i = 0; i < 200; i++) {
        uint8_t small[8];
        for (int j = 0; j < 8; j++)
            small[j] = me == n - 1 ? (uint8_t)(i * 8 + j) : 0xEE;
        rc = ethbcast_bcast(g, n - 1, small, sizeof small);
        if (rc != ETHBCAST_OK)
            FAIL("rank %d: back-to-back bcast %d: %s", me, i, ethbcast_strerror(rc));
        for (int j = 0; j < 8; j++)
            if (small[j] != (uint8_t)(i * 8 + j))
                FAIL("rank %d: back-to-back bcast %d byte %d is %u", me, i, j, small[j]);
        if (me != n - 1)
            expected_bytes_in += 8;
        bcasts++;
    }
    rc = ethbcast_barrier(g);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: barrier: %s", me, ethbcast_strerror(rc));
    /* Root 0 sends 10 bytes, everyone else expects 11: a length error, buffer untouched. */
    size_t len = me == 0 ? 10 : 11;
    memset(buf, 0xAB, 11);
    rc = ethbcast_bcast(g, 0, buf, len);
    if (me == 0 && rc != ETHBCAST_OK)
        FAIL("rank 0: mismatched bcast at the root: %s", ethbcast_strerror(rc));
    if (me != 0) {
        if (rc != ETHBCAST_ERR_LENGTH)
            FAIL("rank %d: mismatched length gave %d, want ETHBCAST_ERR_LENGTH", me, rc);
        for (int i = 0; i < 11; i++)
            if (buf[i] != 0xAB)
                FAIL("rank %d: buffer changed by a failed bcast", me);
    }
    if (ethbcast_bcast(g, n, buf, 1) != ETHBCAST_ERR_BAD_RANK)
        FAIL("rank %d: root %d accepted", me, n);
    if (ethbcast_bcast(NULL, 0, buf, 1) != ETHBCAST_ERR_INVALID)
        FAIL("NULL group accepted");
    rc = ethbcast_barrier(g);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: second barrier: %s", me, ethbcast_strerror(rc));
    ethbcast_counters_t c;
    if (ethbcast_counters(g, &c) != ETHBCAST_OK)
        FAIL("counters");
    if (c.bcasts != bcasts + (me == 0) || c.barriers != 2 || c.bytes_received != expected_bytes_in)
        FAIL("rank %d: counters bcasts %llu barriers %llu bytes_received %llu", me,
             (unsigned long long)c.bcasts, (unsigned long long)c.barriers,
             (unsigned long long)c.bytes_received);
    /* Away from the library with nothing in flight: the progress thread sleeps until a frame
     * or a deadline, so it looks a few times at most (the last acknowledgements), not every
     * few milliseconds (about 30 times in 300 ms). */
    struct timespec away = {0, 300 * 1000 * 1000};
    nanosleep(&away, NULL);
    ethbcast_counters_t later;
    if (ethbcast_counters(g, &later) != ETHBCAST_OK)
        FAIL("counters after the pause");
    unsigned long long looks = later.background_polls - c.background_polls;
    if (looks > 8)
        FAIL("rank %d: the progress thread looked %llu times in 300 ms with nothing to serve", me,
             looks);
    rc = ethbcast_close(g);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: close: %s", me, ethbcast_strerror(rc));
    free(buf);
    printf("ok rank %d size %d bcasts %llu\n", me, n, (unsigned long long)c.bcasts);
    return 0;
}
