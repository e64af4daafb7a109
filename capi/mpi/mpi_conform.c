/* MPI_Bcast conformance, written from the MPI 3.1 standard (section 5.4 for MPI_Bcast, 4.1 for
 * datatypes and type maps, 4.2 for MPI_Pack/MPI_Unpack): run by capi/tests/mpi_conformance.rs
 * under Open MPI and MPICH, with and without the interposer, and it must pass either way.
 *
 * The standard says what a broadcast delivers: the root's buffer, read through its datatype's
 * type map, is written through each receiver's type map; bytes that no entry of the receiver's
 * type map covers (holes, gaps between elements, bytes before a negative lower bound) are not
 * touched. This program checks every byte of that, independently of how any implementation
 * moves the data:
 * - Which bytes a type map covers is found with MPI_Unpack (section 4.2 defines unpacking by the
 *   type map): unpacking count elements of 0xFF bytes into a zeroed region marks exactly them.
 * - The root fills its whole region, holes included, with a pattern; every receiver fills its
 *   region with a different byte at every position. Afterwards a receiver's covered bytes hold
 *   the root's and every other byte still holds its own; the root's region is unchanged.
 *
 * What it broadcasts, from every root: every predefined datatype of MPI 3.1 this MPI provides
 * (C, the MAXLOC/MINLOC pair types, the fixed-size integers, MPI_AINT/OFFSET/COUNT, complex,
 * C++ and Fortran types; a type the MPI lacks is listed as such, never skipped silently), counts
 * 0, 1, 7 and 1031; derived types (vector, indexed out of order, struct with holes, resized,
 * negative lower bounds, contiguous of a pair type); a root and receivers that describe the
 * same type signature differently; on MPI_COMM_WORLD, a duplicate, two halves broadcasting at
 * the same time, a reordered copy of the world, MPI_COMM_SELF and an intercommunicator.
 *
 * With --mismatch (a program the standard calls erroneous, for the interposer only): ranks whose
 * count disagrees with the root's get an error of class MPI_ERR_TRUNCATE for that call, and the
 * next broadcasts are right on every rank.
 *
 * Prints "conform rank R world W broadcasts B congruent C types T" (C: broadcasts on
 * communicators congruent to MPI_COMM_WORLD) and "unavailable: NAME ..." (rank 0), or
 * exits non-zero naming the first wrong byte. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

/* The root's byte at offset i of its region, and a receiver's own byte there: never equal. */
static unsigned char pattern(int root, int salt, size_t i) {
    return (unsigned char)(root * 37u + (unsigned)salt * 101u + i * 13u + (i >> 8));
}
static unsigned char sentinel(int root, int salt, size_t i) {
    return (unsigned char)(pattern(root, salt, i) ^ 0xA5);
}

/* One broadcast from `root` on `comm`, `scount` elements of `stype` at the root and `rcount`
 * of `rtype` at the others (one type signature), every byte checked. `what` names the case. */
static void bcast_checked(MPI_Comm comm, int root, MPI_Datatype stype, int scount,
                          MPI_Datatype rtype, int rcount, int salt, const char *what) {
    int cme;
    OK(MPI_Comm_rank(comm, &cme));
    int is_root = cme == root;
    MPI_Datatype type = is_root ? stype : rtype;
    int count = is_root ? scount : rcount;
    struct region r = region_for(type, count);
    for (size_t i = 0; i < r.len; i++)
        r.base[i] = is_root ? pattern(root, salt, i) : sentinel(root, salt, i);
    int rc = MPI_Bcast(r.buf, count, type, root, comm);
    CHECK(rc == MPI_SUCCESS, "%s: count %d root %d: MPI_Bcast returned %d", what, count, root,
          rc);
    counted(comm);
    if (is_root) {
        for (size_t i = 0; i < r.len; i++)
            CHECK(r.base[i] == pattern(root, salt, i),
                  "%s: count %d root %d: the root's byte %ld changed", what, count, root,
                  (long)(r.base + i - r.buf));
    } else if (stype == rtype) {
        /* Same type: covered bytes are the root's bytes at the same offsets. */
        for (size_t i = 0; i < r.len; i++) {
            unsigned char want = r.mask[i] ? pattern(root, salt, i) : sentinel(root, salt, i);
            CHECK(r.base[i] == want,
                  "%s: count %d root %d: byte %ld (%s) is 0x%02x, not 0x%02x", what, count,
                  root, (long)(r.base + i - r.buf), r.mask[i] ? "data" : "hole", r.base[i],
                  want);
        }
    } else {
        /* Different descriptions of one signature: the k-th covered byte of the receiver is
         * the k-th covered byte of the root, in type map order, which for the cases below
         * (both in increasing address order) is address order. */
        struct region s = region_for(stype, scount);
        size_t j = 0;
        for (size_t i = 0; i < r.len; i++) {
            if (!r.mask[i]) {
                CHECK(r.base[i] == sentinel(root, salt, i), "%s: hole byte %zu touched", what,
                      i);
                continue;
            }
            while (j < s.len && !s.mask[j])
                j++;
            CHECK(j < s.len, "%s: more data than the root sent", what);
            CHECK(r.base[i] == pattern(root, salt, j),
                  "%s: root %d: data byte %zu is 0x%02x, not the root's byte %zu 0x%02x", what,
                  root, i, r.base[i], j, pattern(root, salt, j));
            j++;
        }
        region_free(&s);
    }
    region_free(&r);
}

/* Every root of comm, in turn. */
static void all_roots(MPI_Comm comm, MPI_Datatype type, int count, int salt, const char *what) {
    int cn;
    OK(MPI_Comm_size(comm, &cn));
    for (int root = 0; root < cn; root++)
        bcast_checked(comm, root, type, count, type, count, salt + root, what);
}

struct named {
    MPI_Datatype type;
    const char *name;
};
#define T(t) {t, #t}

static const int counts[] = {0, 1, 7, 1031};

static int available(MPI_Datatype t) {
    if (t == MPI_DATATYPE_NULL)
        return 0;
    int size = 0;
    return MPI_Type_size(t, &size) == MPI_SUCCESS && size > 0;
}

static void predefined(MPI_Comm comm, const char *cname, int *ntypes) {
    struct named types[] = {
        T(MPI_CHAR), T(MPI_SHORT), T(MPI_INT), T(MPI_LONG), T(MPI_LONG_LONG_INT),
        T(MPI_LONG_LONG), T(MPI_SIGNED_CHAR), T(MPI_UNSIGNED_CHAR), T(MPI_UNSIGNED_SHORT),
        T(MPI_UNSIGNED), T(MPI_UNSIGNED_LONG), T(MPI_UNSIGNED_LONG_LONG), T(MPI_FLOAT),
        T(MPI_DOUBLE), T(MPI_LONG_DOUBLE), T(MPI_WCHAR), T(MPI_C_BOOL), T(MPI_INT8_T),
        T(MPI_INT16_T), T(MPI_INT32_T), T(MPI_INT64_T), T(MPI_UINT8_T), T(MPI_UINT16_T),
        T(MPI_UINT32_T), T(MPI_UINT64_T), T(MPI_AINT), T(MPI_COUNT), T(MPI_OFFSET),
        T(MPI_C_COMPLEX), T(MPI_C_FLOAT_COMPLEX), T(MPI_C_DOUBLE_COMPLEX),
        T(MPI_C_LONG_DOUBLE_COMPLEX), T(MPI_BYTE), T(MPI_PACKED),
        /* The pair types of MPI_MAXLOC and MPI_MINLOC: holes inside every element. */
        T(MPI_FLOAT_INT), T(MPI_DOUBLE_INT), T(MPI_LONG_INT), T(MPI_2INT), T(MPI_SHORT_INT),
        T(MPI_LONG_DOUBLE_INT),
#ifdef MPI_CXX_BOOL
        T(MPI_CXX_BOOL), T(MPI_CXX_FLOAT_COMPLEX), T(MPI_CXX_DOUBLE_COMPLEX),
        T(MPI_CXX_LONG_DOUBLE_COMPLEX),
#endif
        /* Fortran's, where the MPI was built with them. */
        T(MPI_CHARACTER), T(MPI_LOGICAL), T(MPI_INTEGER), T(MPI_REAL),
        T(MPI_DOUBLE_PRECISION), T(MPI_COMPLEX), T(MPI_DOUBLE_COMPLEX), T(MPI_2REAL),
        T(MPI_2DOUBLE_PRECISION), T(MPI_2INTEGER), T(MPI_INTEGER1), T(MPI_INTEGER2),
        T(MPI_INTEGER4), T(MPI_INTEGER8), T(MPI_REAL4), T(MPI_REAL8), T(MPI_REAL16),
        T(MPI_COMPLEX8), T(MPI_COMPLEX16), T(MPI_COMPLEX32),
    };
    int nt = (int)(sizeof types / sizeof types[0]);
    char missing[1024] = "";
    size_t used = 0;
    *ntypes = 0;
    for (int k = 0; k < nt; k++) {
        if (!available(types[k].type)) {
            used += (size_t)snprintf(missing + used, sizeof missing - used, " %s",
                                     types[k].name);
            if (used >= sizeof missing)
                used = sizeof missing - 1;
            continue;
        }
        (*ntypes)++;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            char what[128];
            snprintf(what, sizeof what, "%s on %s", types[k].name, cname);
            all_roots(comm, types[k].type, counts[c], k, what);
        }
    }
    if (me == 0 && strcmp(cname, "MPI_COMM_WORLD") == 0)
        printf("unavailable:%s\n", used > 0 ? missing : " none");
}

/* Derived types from section 4.1's constructors, with holes and negative lower bounds. */
static int derived(MPI_Datatype out[], const char *names[]) {
    int k = 0;
    MPI_Type_vector(5, 2, 3, MPI_INT, &out[k]);
    names[k++] = "vector(5,2,3,int)";
    int bl[3] = {1, 3, 2}, dis[3] = {5, 0, 9};
    MPI_Type_indexed(3, bl, dis, MPI_SHORT, &out[k]);
    names[k++] = "indexed out of order (short)";
    {
        int sbl[3] = {1, 1, 1};
        MPI_Aint sdis[3] = {0, 8, 20};
        MPI_Datatype st[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
        MPI_Type_create_struct(3, sbl, sdis, st, &out[k]);
        names[k++] = "struct{char@0,double@8,int@20}";
    }
    MPI_Type_create_resized(MPI_INT, 0, 12, &out[k]);
    names[k++] = "resized(int,lb 0,extent 12)";
    MPI_Type_create_resized(MPI_DOUBLE, -8, 24, &out[k]);
    names[k++] = "resized(double,lb -8,extent 24)";
    {
        int sbl[2] = {2, 1};
        MPI_Aint sdis[2] = {-16, 4};
        MPI_Datatype st[2] = {MPI_INT, MPI_FLOAT};
        MPI_Type_create_struct(2, sbl, sdis, st, &out[k]);
        names[k++] = "struct{int[2]@-16,float@4}";
    }
    MPI_Type_contiguous(3, MPI_DOUBLE_INT, &out[k]);
    names[k++] = "contiguous(3,MPI_DOUBLE_INT)";
    MPI_Type_contiguous(4, MPI_INT, &out[k]);
    names[k++] = "contiguous(4,int)";
    for (int i = 0; i < k; i++)
        OK(MPI_Type_commit(&out[i]));
    return k;
}

static void derived_all(MPI_Comm comm, const char *cname) {
    MPI_Datatype d[16];
    const char *names[16];
    int k = derived(d, names);
    for (int i = 0; i < k; i++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            char what[160];
            snprintf(what, sizeof what, "%s on %s", names[i], cname);
            all_roots(comm, d[i], counts[c], 200 + i, what);
        }
        MPI_Type_free(&d[i]);
    }
}

/* The same type signature described two ways (section 5.4 allows it): 7 MPI_2INT at the root,
 * 14 MPI_INT at the others and the reverse; a vector of ints at the root, plain ints at the
 * others; a pair type at the root, a struct with the same map at the others. */
static void mixed(MPI_Comm comm) {
    MPI_Datatype vec;
    MPI_Type_vector(6, 2, 5, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    for (int root = 0; root < n; root++) {
        bcast_checked(comm, root, MPI_2INT, 7, MPI_INT, 14, 300 + root, "2INT as INT");
        bcast_checked(comm, root, MPI_INT, 14, MPI_2INT, 7, 310 + root, "INT as 2INT");
        bcast_checked(comm, root, vec, 2, MPI_INT, 24, 320 + root, "vector as INT");
        bcast_checked(comm, root, MPI_INT, 24, vec, 2, 330 + root, "INT as vector");
        bcast_checked(comm, root, MPI_DOUBLE_INT, 5, MPI_DOUBLE_INT, 5, 340 + root,
                      "DOUBLE_INT");
    }
    MPI_Type_free(&vec);
}

/* An intercommunicator between the even and the odd ranks: a root of one group broadcasts to
 * the other (MPI_ROOT at the root, MPI_PROC_NULL at its group's others). */
static void intercomm(MPI_Comm half) {
    if (n < 2)
        return;
    MPI_Comm inter;
    int remote_leader = me % 2 == 0 ? 1 : 0;
    OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, remote_leader, 77, &inter));
    int hme, hn, rn;
    MPI_Comm_rank(half, &hme);
    MPI_Comm_size(half, &hn);
    MPI_Comm_remote_size(inter, &rn);
    for (int side = 0; side < 2; side++) {
        int senders = side == 0 ? me % 2 == 0 : me % 2 == 1;
        int nroots = senders ? hn : rn;
        for (int root = 0; root < nroots; root++) {
            int v[9], want[9];
            for (int i = 0; i < 9; i++) {
                want[i] = 1000 * side + 10 * root + i;
                v[i] = senders && hme == root ? want[i] : -1;
            }
            int r = senders ? (hme == root ? MPI_ROOT : MPI_PROC_NULL) : root;
            OK(MPI_Bcast(v, 9, MPI_INT, r, inter));
            counted(inter);
            for (int i = 0; i < 9; i++)
                CHECK(v[i] == (senders && hme != root ? -1 : want[i]),
                      "intercommunicator side %d root %d element %d: %d", side, root, i, v[i]);
        }
    }
    MPI_Comm_free(&inter);
}

/* Counts that disagree with the root's: an error of class MPI_ERR_TRUNCATE at the ranks whose
 * count differs, success at the others, and the next ten broadcasts right everywhere. */
static void mismatch(void) {
    int bad_ranks[2] = {1 % n, (n - 1) % n};
    for (int root = 0; root < n; root++) {
        for (int variant = 0; variant < 3; variant++) {
            /* variant 0: a rank passes fewer ints; 1: a rank passes count 0; 2: the root
             * passes count 0 and the others 16. */
            int want_count = variant == 2 ? 0 : 16;
            int my_count = want_count;
            int bad = 0;
            if (variant < 2 && me != root &&
                (me == bad_ranks[0] || me == bad_ranks[1])) {
                my_count = variant == 0 ? 5 : 0;
                bad = 1;
            }
            if (variant == 2 && me != root) {
                my_count = 16;
                bad = 1;
            }
            if (me == root)
                my_count = want_count;
            int v[16];
            for (int i = 0; i < 16; i++)
                v[i] = me == root ? 7000 + root * 100 + i : -1;
            int rc = MPI_Bcast(v, my_count, MPI_INT, root, MPI_COMM_WORLD);
            counted(MPI_COMM_WORLD);
            int cls = MPI_SUCCESS;
            if (rc != MPI_SUCCESS)
                MPI_Error_class(rc, &cls);
            if (bad)
                CHECK(cls == MPI_ERR_TRUNCATE,
                      "mismatch variant %d root %d: count %d against the root's %d gave error "
                      "class %d, not MPI_ERR_TRUNCATE (%d)",
                      variant, root, my_count, want_count, cls, MPI_ERR_TRUNCATE);
            else
                CHECK(rc == MPI_SUCCESS, "mismatch variant %d root %d: a rank whose count "
                                         "agrees got %d", variant, root, rc);
            /* The next ten broadcasts, from this root and the next, are right. */
            for (int k = 0; k < 10; k++) {
                int r = (root + k % 2) % n;
                int w[16];
                for (int i = 0; i < 16; i++)
                    w[i] = me == r ? 9000 + k * 100 + variant * 10 + i : -1;
                OK(MPI_Bcast(w, 16, MPI_INT, r, MPI_COMM_WORLD));
                for (int i = 0; i < 16; i++)
                    CHECK(w[i] == 9000 + k * 100 + variant * 10 + i,
                          "after mismatch variant %d root %d: broadcast %d element %d is %d",
                          variant, root, k, i, w[i]);
                counted(MPI_COMM_WORLD);
            }
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    /* Errors come back as codes, so that a wrong one is reported, not fatal. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc > 1 && strcmp(argv[1], "--mismatch") == 0) {
        mismatch();
        printf("mismatch rank %d world %d broadcasts %lu congruent %lu\n", me, n, calls,
               congruent);
        fflush(stdout);
        MPI_Finalize();
        return 0;
    }
    int ntypes = 0, dummy = 0;
    predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", &ntypes);
    derived_all(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    mixed(MPI_COMM_WORLD);

    MPI_Comm dup, half, reversed;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    predefined(dup, "a duplicate of MPI_COMM_WORLD", &dummy);
    derived_all(dup, "a duplicate of MPI_COMM_WORLD");

    /* Two halves broadcasting at the same time. */
    OK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half));
    MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN);
    predefined(half, "a half", &dummy);
    derived_all(half, "a half");

    /* The world in reverse order: the same group, other ranks. */
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, n - me, &reversed));
    MPI_Comm_set_errhandler(reversed, MPI_ERRORS_RETURN);
    derived_all(reversed, "the world reversed");
    all_roots(reversed, MPI_DOUBLE_INT, 7, 400, "MPI_DOUBLE_INT on the world reversed");

    derived_all(MPI_COMM_SELF, "MPI_COMM_SELF");
    all_roots(MPI_COMM_SELF, MPI_LONG_DOUBLE_INT, 7, 401, "MPI_LONG_DOUBLE_INT on MPI_COMM_SELF");

    intercomm(half);

    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    MPI_Comm_free(&reversed);
    printf("conform rank %d world %d broadcasts %lu congruent %lu types %d\n", me, n,
           calls, congruent, ntypes);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
