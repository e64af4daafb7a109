/* Checks of the C ABI's growth and handle rules (run by capi/tests/c_abi_compat.rs).
 *
 * `abi_check options`: no group is joined (run without rank/size in the environment). The
 * options carry their size; ethbcast_options_init never writes past the size it is given;
 * ethbcast_open refuses options without a size field (the layout before it, filled by hand
 * as the old ethbcast_options_default filled it) and options of a newer header that set
 * fields this library does not know, but takes a newer header's options whose new fields
 * are 0; key NULL with key_len 32 is ETHBCAST_ERR_INVALID; handles that were never returned
 * by ethbcast_open are refused. Prints "ok options".
 *
 * `abi_check handles IFACE`: two ranks (ETHBCAST_RANK/SIZE). Rank 1 closes its group while
 * another of its threads waits in a broadcast that rank 0 sends a second late: the close is
 * refused (ETHBCAST_ERR_BUSY) and the broadcast completes. Then, on both ranks, a second
 * close and every call on the closed handle give ETHBCAST_ERR_HANDLE (queries -1); a group
 * opened afterwards works while the old handle stays refused. Prints "ok handles rank R". */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ethbcast.h"

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, " [%s]\n", ethbcast_last_error());                                 \
        exit(1);                                                                           \
    } while (0)

/* The options as ethbcast.h had them before they carried their size, with keys. */
typedef struct unsized_options_t {
    uint32_t group_id, timeout_ms, wait, algorithm, expected, progress_thread, linger_ms,
        root_waits_above, host_spin_us;
    const uint8_t *key;
    size_t key_len;
    const char *key_file;
} unsized_options_t;

static void expect_error(const char *what, int rc, int want, const char *needle) {
    if (rc != want)
        FAIL("%s gave %d, want %d", what, rc, want);
    if (needle != NULL && strstr(ethbcast_last_error(), needle) == NULL)
        FAIL("%s: the last error does not say \"%s\"", what, needle);
}

static void check_untouched(const char *what, const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            FAIL("%s: byte %zu changed to 0x%02x", what, i, p[i]);
}

static int options_check(void) {
    /* Not a real interface: options that pass the checks fail on the interface instead. */
    const char *iface = "ebc-nosuch0";
    ethbcast_group_t *g = NULL;
    ethbcast_options_t opts;
    memset(&opts, 0xCC, sizeof opts);
    if (ethbcast_options_default(&opts) != ETHBCAST_OK)
        FAIL("options_default");
    if (opts.size != sizeof opts || opts.timeout_ms == 0 || opts.key != NULL ||
        opts.key_len != 0 || opts.key_file != NULL)
        FAIL("defaults: size %u (sizeof %zu) timeout %u", opts.size, sizeof opts,
             opts.timeout_ms);
    int rc = ethbcast_open(iface, &opts, &g);
    if (rc != ETHBCAST_ERR_NO_INTERFACE || g != NULL)
        FAIL("open with default options gave %d, want ETHBCAST_ERR_NO_INTERFACE", rc);

    /* A size smaller than any sized layout: refused, nothing written. */
    unsigned char small[sizeof(ethbcast_options_t) + 16];
    memset(small, 0xCC, sizeof small);
    expect_error("options_init of 36 bytes", ethbcast_options_init((void *)small, 36),
                 ETHBCAST_ERR_INVALID, "options size 36");
    check_untouched("options_init of 36 bytes", small, sizeof small, 0xCC);
    expect_error("options_init(NULL)", ethbcast_options_default(NULL), ETHBCAST_ERR_INVALID,
                 "NULL");

    /* A newer header's options: 16 bytes of fields this library does not know, then bytes
     * that are not the options'. The library fills the known fields, zeroes the unknown
     * ones, and writes nothing past the size it is given. */
    struct newer_options {
        ethbcast_options_t known;
        uint32_t later[4];
        unsigned char canary[16];
    } newer;
    memset(&newer, 0xCC, sizeof newer);
    if (ethbcast_options_init(&newer.known, offsetof(struct newer_options, canary)) !=
        ETHBCAST_OK)
        FAIL("options_init of a newer header's options");
    if (newer.known.size != sizeof newer.known + sizeof newer.later ||
        newer.known.timeout_ms != opts.timeout_ms)
        FAIL("newer options: size %u", newer.known.size);
    check_untouched("newer options' unknown fields", (unsigned char *)newer.later,
                    sizeof newer.later, 0);
    check_untouched("bytes after newer options", newer.canary, sizeof newer.canary, 0xCC);
    /* Unknown fields left at 0 are "as before": accepted. */
    rc = ethbcast_open(iface, &newer.known, &g);
    if (rc != ETHBCAST_ERR_NO_INTERFACE || g != NULL)
        FAIL("open with a newer header's options at their defaults gave %d", rc);
    /* An unknown field set: refused, naming the sizes. */
    newer.later[1] = 5;
    char want[64];
    snprintf(want, sizeof want, "options of %zu bytes", sizeof newer.known + sizeof newer.later);
    expect_error("open with an unknown field set", ethbcast_open(iface, &newer.known, &g),
                 ETHBCAST_ERR_INVALID, want);
    if (strstr(ethbcast_last_error(), "newer ethbcast.h") == NULL)
        FAIL("the last error does not say the header is newer than the library");

    /* The layout without a size, filled as the old ethbcast_options_default filled it. */
    unsized_options_t old = {0xEBCA57, 30000, 0, 0, 0, 1, 50, UINT32_MAX, 50, NULL, 0, NULL};
    expect_error("open with options without a size field",
                 ethbcast_open(iface, (const ethbcast_options_t *)(const void *)&old, &g),
                 ETHBCAST_ERR_INVALID, "must be rebuilt");
    int host_of[1] = {0};
    expect_error("open_hosts with options without a size field",
                 ethbcast_open_hosts(iface, (const ethbcast_options_t *)(const void *)&old, 0, 1,
                                     host_of, &g),
                 ETHBCAST_ERR_INVALID, "options size 15452759");
    /* A size field never set (here: larger than any options). */
    opts.size = 1u << 20;
    expect_error("open with a size never set", ethbcast_open(iface, &opts, &g),
                 ETHBCAST_ERR_INVALID, "options size 1048576");
    if (g != NULL)
        FAIL("a refused open stored a handle");

    /* key NULL with a key length: an error, never "no key". */
    ethbcast_options_default(&opts);
    opts.key = NULL;
    opts.key_len = 32;
    expect_error("open with key NULL and key_len 32", ethbcast_open(iface, &opts, &g),
                 ETHBCAST_ERR_INVALID, "key_len is 32");

    /* Values that were never handles: an address, and a value shaped like a handle. */
    int not_a_group = 0;
    ethbcast_group_t *foreign[] = {(ethbcast_group_t *)(void *)&not_a_group,
                                   (ethbcast_group_t *)(uintptr_t)0x100000001u};
    uint8_t byte = 0;
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        ethbcast_group_t *h = foreign[i];
        expect_error("bcast on a foreign handle", ethbcast_bcast(h, 0, &byte, 1),
                     ETHBCAST_ERR_HANDLE, "not open");
        expect_error("barrier on a foreign handle", ethbcast_barrier(h), ETHBCAST_ERR_HANDLE,
                     NULL);
        expect_error("close of a foreign handle", ethbcast_close(h), ETHBCAST_ERR_HANDLE, NULL);
        if (ethbcast_rank(h) != -1 || ethbcast_size(h) != -1 || ethbcast_keyed(h) != -1)
            FAIL("a query on a foreign handle did not give -1");
    }
    if (not_a_group != 0)
        FAIL("a call wrote through a foreign handle");
    printf("ok options\n");
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

struct pending {
    ethbcast_group_t *g;
    uint8_t buf[64];
    int rc;
    atomic_int calling;
};

static void *receive(void *arg) {
    struct pending *p = arg;
    atomic_store(&p->calling, 1);
    p->rc = ethbcast_bcast(p->g, 0, p->buf, sizeof p->buf);
    return NULL;
}

static ethbcast_group_t *open_group(const char *iface) {
    ethbcast_options_t opts;
    ethbcast_options_default(&opts);
    opts.wait = ETHBCAST_WAIT_BLOCK;
    opts.timeout_ms = 20000;
    ethbcast_group_t *g = NULL;
    int rc = ethbcast_open(iface, &opts, &g);
    if (rc != ETHBCAST_OK)
        FAIL("open: %s", ethbcast_strerror(rc));
    return g;
}

static int handles_check(const char *iface) {
    ethbcast_group_t *g = open_group(iface);
    int me = ethbcast_rank(g);
    if (ethbcast_size(g) != 2)
        FAIL("size %d, want 2", ethbcast_size(g));
    uint8_t msg[64];
    if (me == 0) {
        /* Late, so that rank 1 is inside its broadcast when it tries to close. */
        sleep_ms(1000);
        for (size_t i = 0; i < sizeof msg; i++)
            msg[i] = (uint8_t)(i * 7 + 1);
        int rc = ethbcast_bcast(g, 0, msg, sizeof msg);
        if (rc != ETHBCAST_OK)
            FAIL("rank 0: bcast: %s", ethbcast_strerror(rc));
    } else {
        struct pending p = {g, {0}, -100, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, receive, &p) != 0)
            FAIL("pthread_create");
        while (!atomic_load(&p.calling))
            sleep_ms(1);
        sleep_ms(300);
        int rc = ethbcast_close(g);
        pthread_join(t, NULL);
        /* The other thread is inside its call (rank 0 sends after 1 s): the close is refused,
         * the handle stays open and the call completes. */
        if (rc != ETHBCAST_ERR_BUSY)
            FAIL("rank 1: close during a call gave %d (the call %d), want ETHBCAST_ERR_BUSY", rc,
                 p.rc);
        if (strstr(ethbcast_last_error(), "another thread") == NULL)
            FAIL("rank 1: the last error of the refused close does not say why");
        if (p.rc != ETHBCAST_OK)
            FAIL("rank 1: bcast after a refused close gave %d", p.rc);
        for (size_t i = 0; i < sizeof p.buf; i++)
            if (p.buf[i] != (uint8_t)(i * 7 + 1))
                FAIL("rank 1: byte %zu is %u", i, p.buf[i]);
    }
    ethbcast_group_t *closed = g;
    int rc = ethbcast_close(g);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: close: %s", me, ethbcast_strerror(rc));
    /* Everything on the closed handle is refused. */
    expect_error("second close", ethbcast_close(closed), ETHBCAST_ERR_HANDLE, "not open");
    expect_error("bcast after close", ethbcast_bcast(closed, 0, msg, sizeof msg),
                 ETHBCAST_ERR_HANDLE, "closed already");
    expect_error("barrier after close", ethbcast_barrier(closed), ETHBCAST_ERR_HANDLE, NULL);
    expect_error("flush after close", ethbcast_flush(closed), ETHBCAST_ERR_HANDLE, NULL);
    ethbcast_counters_t c;
    expect_error("counters after close", ethbcast_counters(closed, &c), ETHBCAST_ERR_HANDLE,
                 NULL);
    if (ethbcast_rank(closed) != -1 || ethbcast_size(closed) != -1 ||
        ethbcast_keyed(closed) != -1)
        FAIL("a query on a closed handle did not give -1");
    /* A new group works; the old handle stays refused. */
    ethbcast_group_t *again = open_group(iface);
    if (again == closed)
        FAIL("the new group has the closed group's handle");
    expect_error("bcast on the closed handle after a new open",
                 ethbcast_bcast(closed, 0, msg, sizeof msg), ETHBCAST_ERR_HANDLE, NULL);
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = me == 1 ? (uint8_t)(255 - i) : 0;
    rc = ethbcast_bcast(again, 1, msg, sizeof msg);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: bcast on the new group: %s", me, ethbcast_strerror(rc));
    for (size_t i = 0; i < sizeof msg; i++)
        if (msg[i] != (uint8_t)(255 - i))
            FAIL("rank %d: new group byte %zu is %u", me, i, msg[i]);
    rc = ethbcast_close(again);
    if (rc != ETHBCAST_OK)
        FAIL("rank %d: close of the new group: %s", me, ethbcast_strerror(rc));
    printf("ok handles rank %d\n", me);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "options") == 0)
        return options_check();
    if (argc > 2 && strcmp(argv[1], "handles") == 0)
        return handles_check(argv[2]);
    fprintf(stderr, "usage: abi_check options | abi_check handles IFACE\n");
    return 2;
}
