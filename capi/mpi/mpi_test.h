/* What the MPI test programs of capi/tests/ share: the rank and size of MPI_COMM_WORLD, the
 * count of collective calls and of those on communicators congruent to MPI_COMM_WORLD (the
 * ones the interposer takes), the checks that abort the job naming the rank, and the guarded
 * regions whose every byte a check reads (which bytes a type map covers, which it must not
 * touch). Included by
 * one program each: the definitions are the program's own. */
#ifndef ETHBCAST_MPI_TEST_H
#define ETHBCAST_MPI_TEST_H

#include <mpi.h>
#include <stdio.h>

static int me, n;
static unsigned long calls, congruent;

/* Counts a call, and whether its communicator is congruent to MPI_COMM_WORLD. */
static void counted(MPI_Comm comm) {
    int result = MPI_UNEQUAL, inter = 0;
    calls++;
    MPI_Comm_test_inter(comm, &inter);
    if (!inter)
        MPI_Comm_compare(MPI_COMM_WORLD, comm, &result);
    congruent += result == MPI_IDENT || result == MPI_CONGRUENT;
}

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "rank %d: ", me);                                                  \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        fflush(stderr);                                                                    \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    } while (0)
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond))                                                                       \
            FAIL(__VA_ARGS__);                                                             \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

#include <stdlib.h>
#include <string.h>

/* Bytes of guard on either side of a region: a write past the type map's ends lands there. */
#define GUARD 64

/* A region for `count` elements of `type`, GUARD bytes either side, and which bytes the type
 * map covers (found with MPI_Unpack, 4.2: unpacking count elements of 0xFF bytes into a zeroed
 * region marks exactly them). */
struct region {
    unsigned char *base; /* malloc'd */
    unsigned char *buf;  /* what the MPI call is given */
    unsigned char *mask; /* 1 where the type map covers the byte */
    long lo;             /* offset of base from buf */
    size_t len;          /* bytes in base */
};

static inline struct region region_for(MPI_Datatype type, int count) {
    MPI_Aint lb, extent, tlb, textent;
    OK(MPI_Type_get_extent(type, &lb, &extent));
    OK(MPI_Type_get_true_extent(type, &tlb, &textent));
    MPI_Aint lo = 0, hi = 0;
    if (count > 0) {
        MPI_Aint last = (MPI_Aint)(count - 1) * extent;
        lo = tlb + (last < 0 ? last : 0);
        hi = tlb + textent + (last > 0 ? last : 0);
    }
    if (lo > 0)
        lo = 0;
    if (hi < 0)
        hi = 0;
    struct region r;
    r.len = (size_t)(hi - lo) + 2 * GUARD;
    r.base = malloc(r.len);
    r.mask = calloc(r.len, 1);
    CHECK(r.base != NULL && r.mask != NULL, "out of memory");
    r.buf = r.base + GUARD - lo;
    r.lo = (long)lo - GUARD;
    int tsize;
    OK(MPI_Type_size(type, &tsize));
    size_t bytes = (size_t)tsize * (size_t)count;
    if (bytes > 0) {
        unsigned char *ff = malloc(bytes);
        CHECK(ff != NULL, "out of memory");
        memset(ff, 0xFF, bytes);
        memset(r.base, 0, r.len);
        int pos = 0;
        OK(MPI_Unpack(ff, (int)bytes, &pos, r.buf, count, type, MPI_COMM_SELF));
        CHECK((size_t)pos == bytes, "MPI_Unpack consumed %d of %zu bytes", pos, bytes);
        size_t covered = 0;
        for (size_t i = 0; i < r.len; i++) {
            r.mask[i] = r.base[i] != 0;
            covered += r.mask[i];
        }
        CHECK(covered <= bytes, "type map covers %zu bytes of a %zu-byte signature", covered,
              bytes);
        free(ff);
    }
    return r;
}

static inline void region_free(struct region *r) {
    free(r->base);
    free(r->mask);
}

/* Whether offset `o` (from buf) is covered in r, and its index in base. */
static inline int covers(const struct region *r, long o, size_t *at) {
    long i = o - r->lo;
    if (i < 0 || (size_t)i >= r->len || !r->mask[i])
        return 0;
    *at = (size_t)i;
    return 1;
}

#endif
