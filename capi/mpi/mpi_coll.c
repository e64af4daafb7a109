/* MPI_Allgather, MPI_Allgatherv, MPI_Allreduce and MPI_Reduce conformance, written from the MPI
 * 3.1 standard (5.7 for the gathers, 5.9 for the reductions: 5.9.2 says which predefined op
 * applies to which type, 5.9.4 MINLOC/MAXLOC, 5.9.5 user-defined ops and their order; 4.1 for
 * type maps): run by capi/tests/mpi_conformance.rs under Open MPI and MPICH, with and without
 * the interposer, and it must pass either way.
 *
 * What it checks, on MPI_COMM_WORLD, a duplicate, two halves at the same time, the world in
 * reverse order, MPI_COMM_SELF and an intercommunicator between the even and the odd ranks:
 * - Allgather of every predefined type the MPI provides, counts 0, 1, 7 and 1031, and of
 *   derived types with holes and negative lower bounds: every byte of every receiver's buffer
 *   (each part where the type map puts it, every other byte untouched); Allgatherv with counts
 *   that differ per rank and displacements out of rank order with gaps; MPI_IN_PLACE; a
 *   signature described two ways (ints against MPI_2INT); zero counts with NULL buffers.
 * - Allreduce of every predefined op on every predefined type 5.9.2 defines it for (C and
 *   Fortran integers, floating point, logical, complex, byte, MPI_AINT/OFFSET/COUNT; MINLOC
 *   and MAXLOC on the pair types), counts 0, 1, 7 and 1031, values whose result is exact in any
 *   order; MPI_IN_PLACE; a user-defined op on a derived type with holes (holes untouched); a
 *   user-defined commutative op and non-commutative ones (2x2 matrix products on a derived type,
 *   compositions of affine maps on MPI_UINT64_T; they show the order: 5.9.5 fixes rank order);
 *   MPI_SUM on a pair type, MPI_MAXLOC on MPI_INT and a predefined op on a derived type are
 *   errors (with MPI_ERRORS_RETURN), and the next calls are right.
 * - Reduce: the same cases on the world (a half, the world reversed and MPI_COMM_SELF with
 *   user-defined ops and pair types), to a root that moves from call to call, the result
 *   checked at the root (5.9.1: recvbuf is significant there only, MPI_IN_PLACE is the root's);
 *   the errors are asserted at the root.
 *
 * --light: every type and op at count 7 and every other kind of case once (for MPICH, whose
 * ranks busy-poll).
 * --identity: MPI_SUM of 1031 doubles of mixed magnitude, whose rounding depends on the order;
 * prints "identity identical" when every rank got bitwise the same result, else "identity
 * differs on K ranks" (MPI does not promise it; the interposer does).
 * --stream: 300 allgathers, 300 allreduces and 300 reduces of changing lengths, every element
 * checked.
 * --mismatch (a program the standard calls erroneous, for the interposer only): a rank whose
 * count disagrees gets an error of class MPI_ERR_TRUNCATE (of MPI_Reduce, the root), and the
 * next calls are right; so does MPI_IN_PLACE at a rank of MPI_Reduce other than the root.
 *
 * Prints "coll rank R world W calls C congruent K" (K: calls on communicators congruent to
 * MPI_COMM_WORLD) and, at rank 0, "unavailable: NAME ...", or exits non-zero naming the first
 * wrong byte. */
#include <complex.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

static unsigned char pattern(int rank, int salt, long i) {
    return (unsigned char)(rank * 37u + (unsigned)salt * 101u + (unsigned long)i * 13u +
                           ((unsigned long)i >> 8) + 1);
}
static unsigned char sentinel(int salt, long i) {
    return (unsigned char)(0x5A ^ (unsigned)salt ^ (unsigned long)i * 7u);
}

/* Allgatherv on comm (an intracommunicator of cn ranks): rank q sends counts[q] elements of
 * `type`, which land at displs[q] elements of the receive buffer; every byte checked. */
static void gatherv_checked(MPI_Comm comm, MPI_Datatype type, const int *counts,
                            const int *displs, int vector, int in_place, int salt,
                            const char *what) {
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    MPI_Aint lb, extent;
    OK(MPI_Type_get_extent(type, &lb, &extent));
    int span = 0;
    for (int q = 0; q < cn; q++)
        if (counts[q] > 0 && displs[q] + counts[q] > span)
            span = displs[q] + counts[q];
    struct region *sent = malloc((size_t)cn * sizeof *sent);
    CHECK(sent != NULL, "out of memory");
    for (int q = 0; q < cn; q++) {
        sent[q] = region_for(type, counts[q]);
        for (size_t i = 0; i < sent[q].len; i++)
            sent[q].base[i] = pattern(q, salt, (long)i + sent[q].lo);
    }
    struct region recv = region_for(type, span);
    for (size_t i = 0; i < recv.len; i++)
        recv.base[i] = sentinel(salt, (long)i + recv.lo);
    const struct region *mine = &sent[cme];
    if (in_place) {
        /* This rank's part at its place: its covered bytes, the rest of the buffer as is. */
        long shift = (long)displs[cme] * (long)extent;
        for (size_t i = 0; i < mine->len; i++)
            if (mine->mask[i])
                recv.buf[(long)i + mine->lo + shift] = mine->base[i];
    }
    int rc;
    if (vector)
        rc = MPI_Allgatherv(in_place ? MPI_IN_PLACE : mine->buf, counts[cme], type, recv.buf,
                            counts, displs, type, comm);
    else
        rc = MPI_Allgather(in_place ? MPI_IN_PLACE : mine->buf, counts[cme], type, recv.buf,
                           counts[cme], type, comm);
    CHECK(rc == MPI_SUCCESS, "%s: %s returned %d", what, vector ? "MPI_Allgatherv" : "MPI_Allgather",
          rc);
    counted(comm);
    for (size_t i = 0; i < recv.len; i++) {
        long o = (long)i + recv.lo;
        unsigned char want = sentinel(salt, o);
        const char *kind = "hole";
        for (int q = 0; q < cn; q++) {
            size_t at;
            if (covers(&sent[q], o - (long)displs[q] * (long)extent, &at)) {
                want = sent[q].base[at];
                kind = "data";
                break;
            }
        }
        CHECK(recv.base[i] == want, "%s: byte %ld (%s) is 0x%02x, not 0x%02x", what, o, kind,
              recv.base[i], want);
    }
    /* The send buffer is unchanged. */
    for (size_t i = 0; i < mine->len; i++)
        CHECK(mine->base[i] == pattern(cme, salt, (long)i + mine->lo),
              "%s: the send buffer changed", what);
    region_free(&recv);
    for (int q = 0; q < cn; q++)
        region_free(&sent[q]);
    free(sent);
}

static void gather_all_ways(MPI_Comm comm, MPI_Datatype type, int count, int salt,
                            const char *what) {
    int cn;
    OK(MPI_Comm_size(comm, &cn));
    int *c = malloc(2 * (size_t)cn * sizeof *c);
    CHECK(c != NULL, "out of memory");
    for (int q = 0; q < cn; q++) {
        c[q] = count;
        c[cn + q] = q * count;
    }
    char w[200];
    snprintf(w, sizeof w, "allgather of %s", what);
    gatherv_checked(comm, type, c, c + cn, 0, 0, salt, w);
    snprintf(w, sizeof w, "allgather in place of %s", what);
    gatherv_checked(comm, type, c, c + cn, 0, 1, salt + 1, w);
    /* Counts that differ per rank, parts in reverse rank order with a gap of one element. (Not
     * on a communicator of one rank: MPICH 4.0's MPI_Allgatherv there puts the part of a
     * derived type at displacement 0, not at displs[0].) */
    if (cn == 1) {
        free(c);
        return;
    }
    int at = 0;
    for (int q = cn - 1; q >= 0; q--) {
        c[q] = count == 0 ? 0 : (count + q) % (count + 3);
        c[cn + q] = at + 1;
        at += c[q] + 1;
    }
    snprintf(w, sizeof w, "allgatherv of %s", what);
    gatherv_checked(comm, type, c, c + cn, 1, 0, salt + 2, w);
    snprintf(w, sizeof w, "allgatherv in place of %s", what);
    gatherv_checked(comm, type, c, c + cn, 1, 1, salt + 3, w);
    free(c);
}

struct named {
    MPI_Datatype type;
    const char *name;
};
#define T(t) {t, #t}

static const int counts[] = {0, 1, 7, 1031};
#define NCOUNTS ((int)(sizeof counts / sizeof counts[0]))

static int available(MPI_Datatype t) {
    if (t == MPI_DATATYPE_NULL)
        return 0;
    int size = 0;
    return MPI_Type_size(t, &size) == MPI_SUCCESS && size > 0;
}

static void gather_predefined(MPI_Comm comm, const char *cname, int every_count) {
    struct named types[] = {
        T(MPI_CHAR), T(MPI_SHORT), T(MPI_INT), T(MPI_LONG), T(MPI_LONG_LONG_INT),
        T(MPI_SIGNED_CHAR), T(MPI_UNSIGNED_CHAR), T(MPI_UNSIGNED_SHORT), T(MPI_UNSIGNED),
        T(MPI_UNSIGNED_LONG), T(MPI_UNSIGNED_LONG_LONG), T(MPI_FLOAT), T(MPI_DOUBLE),
        T(MPI_LONG_DOUBLE), T(MPI_WCHAR), T(MPI_C_BOOL), T(MPI_INT8_T), T(MPI_INT16_T),
        T(MPI_INT64_T), T(MPI_UINT64_T), T(MPI_AINT), T(MPI_COUNT), T(MPI_OFFSET),
        T(MPI_C_DOUBLE_COMPLEX), T(MPI_C_LONG_DOUBLE_COMPLEX), T(MPI_BYTE), T(MPI_PACKED),
        T(MPI_FLOAT_INT), T(MPI_DOUBLE_INT), T(MPI_LONG_INT), T(MPI_2INT), T(MPI_SHORT_INT),
        T(MPI_LONG_DOUBLE_INT), T(MPI_INTEGER), T(MPI_DOUBLE_PRECISION), T(MPI_COMPLEX),
        T(MPI_LOGICAL), T(MPI_2DOUBLE_PRECISION),
    };
    int nt = (int)(sizeof types / sizeof types[0]);
    for (int k = 0; k < nt; k++) {
        if (!available(types[k].type))
            continue;
        for (int c = every_count ? 0 : 2; c < (every_count ? NCOUNTS : 3); c++) {
            char what[160];
            snprintf(what, sizeof what, "%d %s on %s", counts[c], types[k].name, cname);
            gather_all_ways(comm, types[k].type, counts[c], 10 * k + c, what);
        }
    }
}

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
    MPI_Type_create_resized(MPI_DOUBLE, -8, 24, &out[k]);
    names[k++] = "resized(double,lb -8,extent 24)";
    MPI_Type_contiguous(3, MPI_DOUBLE_INT, &out[k]);
    names[k++] = "contiguous(3,MPI_DOUBLE_INT)";
    for (int i = 0; i < k; i++)
        OK(MPI_Type_commit(&out[i]));
    return k;
}

static void gather_derived(MPI_Comm comm, const char *cname) {
    MPI_Datatype d[8];
    const char *names[8];
    int k = derived(d, names);
    for (int i = 0; i < k; i++) {
        for (int c = 0; c < NCOUNTS; c++) {
            char what[200];
            snprintf(what, sizeof what, "%d %s on %s", counts[c], names[i], cname);
            gather_all_ways(comm, d[i], counts[c], 500 + 10 * i + c, what);
        }
        MPI_Type_free(&d[i]);
    }
}

/* One signature described two ways (5.7: the type signatures must match, not the types): each
 * rank sends 2k MPI_INT and every rank receives k MPI_2INT per rank. */
static void gather_mixed(MPI_Comm comm) {
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    /* Zero counts with NULL buffers (no element is read or written). */
    int *zeros = calloc((size_t)cn, sizeof *zeros);
    CHECK(zeros != NULL, "out of memory");
    OK(MPI_Allgather(NULL, 0, MPI_INT, NULL, 0, MPI_INT, comm));
    counted(comm);
    OK(MPI_Allgatherv(NULL, 0, MPI_INT, NULL, zeros, zeros, MPI_INT, comm));
    counted(comm);
    free(zeros);
    int k = 9;
    int *send = malloc(2 * (size_t)k * sizeof(int));
    int *recv = malloc(2 * (size_t)k * (size_t)cn * sizeof(int));
    CHECK(send != NULL && recv != NULL, "out of memory");
    for (int i = 0; i < 2 * k; i++)
        send[i] = 1000 * cme + i;
    OK(MPI_Allgather(send, 2 * k, MPI_INT, recv, k, MPI_2INT, comm));
    counted(comm);
    for (int q = 0; q < cn; q++)
        for (int i = 0; i < 2 * k; i++)
            CHECK(recv[q * 2 * k + i] == 1000 * q + i, "ints as 2INT: rank %d element %d is %d",
                  q, i, recv[q * 2 * k + i]);
    free(send);
    free(recv);
}

/* ---- Reductions ---- */

enum kind { K_INT, K_UINT, K_FLOAT, K_COMPLEX, K_BOOL, K_LOGICAL, K_BYTE };

struct rtype {
    MPI_Datatype type;
    const char *name;
    enum kind kind;
    int cls; /* 5.9.2's class: see the op table below */
};

/* 5.9.2's classes. */
enum {
    C_INTEGER = 1,
    F_INTEGER = 2,
    FLOATING = 4,
    LOGICAL = 8,
    COMPLEX = 16,
    BYTE = 32,
    MULTI = 64 /* MPI_AINT, MPI_OFFSET, MPI_COUNT */
};

struct rop {
    MPI_Op op;
    const char *name;
    int classes; /* which classes 5.9.2 defines it for */
};

/* Element i of rank r's contribution to op, as a number: results stay exact (small integers)
 * in every type and every order. */
static long double contribution(int opk, int r, int i) {
    switch (opk) {
    case 0: /* MAX */
    case 1: /* MIN */
        return (long double)((r * 7 + i * 3) % 11);
    case 2: /* SUM */
        return (long double)((r + i) % 3);
    case 3: /* PROD: 2 at one rank per element, 1 elsewhere */
        return i % n == r ? 2 : 1;
    case 4: /* LAND */
        return (r + i) % 5 != 0;
    case 5: /* LOR */
        return (r * 3 + i) % 7 == 0;
    case 6: /* LXOR */
        return (r + i) % 2;
    case 7: /* BAND: every bit but one */
        return (long double)(0x7F ^ (1 << ((r + i) % 7)));
    case 8: /* BOR */
    case 9: /* BXOR */
        return (long double)(1 << ((r * 2 + i) % 7));
    }
    return 0;
}

static long double expected(int opk, int i, int cn) {
    long double acc = contribution(opk, 0, i);
    for (int r = 1; r < cn; r++) {
        long double v = contribution(opk, r, i);
        long a = (long)acc, b = (long)v;
        switch (opk) {
        case 0: acc = v > acc ? v : acc; break;
        case 1: acc = v < acc ? v : acc; break;
        case 2: acc += v; break;
        case 3: acc *= v; break;
        case 4: acc = a && b; break;
        case 5: acc = a || b; break;
        case 6: acc = (a != 0) != (b != 0); break;
        case 7: acc = a & b; break;
        case 8: acc = a | b; break;
        case 9: acc = a ^ b; break;
        }
    }
    return acc;
}

static void put(void *p, const struct rtype *t, int size, long double v) {
    switch (t->kind) {
    case K_INT:
    case K_BOOL:
    case K_LOGICAL:
        if (t->kind == K_BOOL && size == (int)sizeof(bool)) {
            *(bool *)p = v != 0;
            return;
        }
        if (size == 1) *(int8_t *)p = (int8_t)v;
        else if (size == 2) *(int16_t *)p = (int16_t)v;
        else if (size == 4) *(int32_t *)p = (int32_t)v;
        else *(int64_t *)p = (int64_t)v;
        return;
    case K_UINT:
    case K_BYTE:
        if (size == 1) *(uint8_t *)p = (uint8_t)v;
        else if (size == 2) *(uint16_t *)p = (uint16_t)v;
        else if (size == 4) *(uint32_t *)p = (uint32_t)v;
        else *(uint64_t *)p = (uint64_t)v;
        return;
    case K_FLOAT:
        if (size == sizeof(float)) *(float *)p = (float)v;
        else if (size == sizeof(double)) *(double *)p = (double)v;
        else *(long double *)p = v;
        return;
    case K_COMPLEX: /* v + 0i: the real part carries it */
        if (size == sizeof(float complex)) *(float complex *)p = (float)v;
        else if (size == sizeof(double complex)) *(double complex *)p = (double)v;
        else *(long double complex *)p = v;
        return;
    }
}

static long double get(const void *p, const struct rtype *t, int size, long double *imag) {
    *imag = 0;
    switch (t->kind) {
    case K_INT:
    case K_BOOL:
    case K_LOGICAL:
        if (t->kind == K_BOOL && size == (int)sizeof(bool))
            return *(const bool *)p;
        if (size == 1) return *(const int8_t *)p;
        if (size == 2) return *(const int16_t *)p;
        if (size == 4) return *(const int32_t *)p;
        return (long double)*(const int64_t *)p;
    case K_UINT:
    case K_BYTE:
        if (size == 1) return *(const uint8_t *)p;
        if (size == 2) return *(const uint16_t *)p;
        if (size == 4) return *(const uint32_t *)p;
        return (long double)*(const uint64_t *)p;
    case K_FLOAT:
        if (size == sizeof(float)) return *(const float *)p;
        if (size == sizeof(double)) return *(const double *)p;
        return *(const long double *)p;
    case K_COMPLEX:
        if (size == sizeof(float complex)) {
            *imag = cimagf(*(const float complex *)p);
            return crealf(*(const float complex *)p);
        }
        if (size == sizeof(double complex)) {
            *imag = cimag(*(const double complex *)p);
            return creal(*(const double complex *)p);
        }
        *imag = cimagl(*(const long double complex *)p);
        return creall(*(const long double complex *)p);
    }
    return 0;
}

/* The reduction under test: MPI_Allreduce, or, once `rooted` is set, MPI_Reduce to a root that
 * moves from call to call (the same on every rank: every rank makes the same calls). 5.9.1:
 * recvbuf is significant only at the root, and MPI_IN_PLACE is the root's alone (elsewhere the
 * contribution is passed from recvbuf, which holds it). *mine says whether this rank's recvbuf
 * holds a result to check. */
static int rooted = 0;
static unsigned long reductions = 0;

static int reduction(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                     int *mine) {
    if (!rooted) {
        *mine = 1;
        return MPI_Allreduce(s, r, count, t, op, comm);
    }
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    int root = (int)(reductions++ % (unsigned long)cn);
    *mine = cme == root;
    if (!*mine && s == MPI_IN_PLACE)
        s = r;
    return MPI_Reduce(s, *mine ? r : NULL, count, t, op, root, comm);
}

static const char *reduced(void) {
    return rooted ? "reduce" : "allreduce";
}

static void reduce_checked(MPI_Comm comm, const struct rtype *t, const struct rop *o, int opk,
                           int count, int in_place, const char *cname) {
    int cme, cn, size;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    OK(MPI_Type_size(t->type, &size));
    unsigned char *send = malloc((size_t)size * (size_t)count + 1);
    unsigned char *recv = malloc((size_t)size * (size_t)count + 1);
    CHECK(send != NULL && recv != NULL, "out of memory");
    for (int i = 0; i < count; i++) {
        put(send + (size_t)i * size, t, size, contribution(opk, cme, i));
        put(recv + (size_t)i * size, t, size, in_place ? contribution(opk, cme, i) : 99);
    }
    int mine;
    int rc = reduction(in_place ? MPI_IN_PLACE : send, recv, count, t->type, o->op, comm, &mine);
    counted(comm);
    CHECK(rc == MPI_SUCCESS, "%s %s of %d %s on %s%s returned %d", reduced(), o->name, count,
          t->name, cname, in_place ? " in place" : "", rc);
    for (int i = 0; mine && i < count; i++) {
        long double im, got = get(recv + (size_t)i * size, t, size, &im);
        long double want = expected(opk, i, cn);
        int logical = t->kind == K_LOGICAL && opk >= 4 && opk <= 6;
        int ok = logical ? (got != 0) == (want != 0) : got == want && im == 0;
        CHECK(ok, "%s %s of %d %s on %s%s: element %d is %Lg%+Lgi, not %Lg", reduced(), o->name,
              count, t->name, cname, in_place ? " in place" : "", i, got, im, want);
    }
    free(send);
    free(recv);
}

static const struct rop ops[] = {
    {MPI_MAX, "MPI_MAX", C_INTEGER | F_INTEGER | FLOATING | MULTI},
    {MPI_MIN, "MPI_MIN", C_INTEGER | F_INTEGER | FLOATING | MULTI},
    {MPI_SUM, "MPI_SUM", C_INTEGER | F_INTEGER | FLOATING | COMPLEX | MULTI},
    {MPI_PROD, "MPI_PROD", C_INTEGER | F_INTEGER | FLOATING | COMPLEX | MULTI},
    {MPI_LAND, "MPI_LAND", C_INTEGER | LOGICAL},
    {MPI_LOR, "MPI_LOR", C_INTEGER | LOGICAL},
    {MPI_LXOR, "MPI_LXOR", C_INTEGER | LOGICAL},
    {MPI_BAND, "MPI_BAND", C_INTEGER | F_INTEGER | BYTE | MULTI},
    {MPI_BOR, "MPI_BOR", C_INTEGER | F_INTEGER | BYTE | MULTI},
    {MPI_BXOR, "MPI_BXOR", C_INTEGER | F_INTEGER | BYTE | MULTI},
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

static void reduce_predefined(MPI_Comm comm, const char *cname, int every_count) {
    const struct rtype types[] = {
        {MPI_INT, "MPI_INT", K_INT, C_INTEGER},
        {MPI_LONG, "MPI_LONG", K_INT, C_INTEGER},
        {MPI_SHORT, "MPI_SHORT", K_INT, C_INTEGER},
        {MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", K_UINT, C_INTEGER},
        {MPI_UNSIGNED, "MPI_UNSIGNED", K_UINT, C_INTEGER},
        {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", K_UINT, C_INTEGER},
        {MPI_LONG_LONG_INT, "MPI_LONG_LONG_INT", K_INT, C_INTEGER},
        {MPI_LONG_LONG, "MPI_LONG_LONG", K_INT, C_INTEGER},
        {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", K_UINT, C_INTEGER},
        {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", K_INT, C_INTEGER},
        {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", K_UINT, C_INTEGER},
        {MPI_INT8_T, "MPI_INT8_T", K_INT, C_INTEGER},
        {MPI_INT16_T, "MPI_INT16_T", K_INT, C_INTEGER},
        {MPI_INT32_T, "MPI_INT32_T", K_INT, C_INTEGER},
        {MPI_INT64_T, "MPI_INT64_T", K_INT, C_INTEGER},
        {MPI_UINT8_T, "MPI_UINT8_T", K_UINT, C_INTEGER},
        {MPI_UINT16_T, "MPI_UINT16_T", K_UINT, C_INTEGER},
        {MPI_UINT32_T, "MPI_UINT32_T", K_UINT, C_INTEGER},
        {MPI_UINT64_T, "MPI_UINT64_T", K_UINT, C_INTEGER},
        {MPI_INTEGER, "MPI_INTEGER", K_INT, F_INTEGER},
        {MPI_FLOAT, "MPI_FLOAT", K_FLOAT, FLOATING},
        {MPI_DOUBLE, "MPI_DOUBLE", K_FLOAT, FLOATING},
        {MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", K_FLOAT, FLOATING},
        {MPI_REAL, "MPI_REAL", K_FLOAT, FLOATING},
        {MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION", K_FLOAT, FLOATING},
        {MPI_LOGICAL, "MPI_LOGICAL", K_LOGICAL, LOGICAL},
        {MPI_C_BOOL, "MPI_C_BOOL", K_BOOL, LOGICAL},
        {MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX", K_COMPLEX, COMPLEX},
        {MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", K_COMPLEX, COMPLEX},
        {MPI_C_LONG_DOUBLE_COMPLEX, "MPI_C_LONG_DOUBLE_COMPLEX", K_COMPLEX, COMPLEX},
        {MPI_COMPLEX, "MPI_COMPLEX", K_COMPLEX, COMPLEX},
        {MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", K_COMPLEX, COMPLEX},
        {MPI_BYTE, "MPI_BYTE", K_BYTE, BYTE},
        {MPI_AINT, "MPI_AINT", K_INT, MULTI},
        {MPI_OFFSET, "MPI_OFFSET", K_INT, MULTI},
        {MPI_COUNT, "MPI_COUNT", K_INT, MULTI},
    };
    int nt = (int)(sizeof types / sizeof types[0]);
    for (int k = 0; k < nt; k++) {
        if (!available(types[k].type))
            continue;
        for (int o = 0; o < NOPS; o++) {
            if (!(ops[o].classes & types[k].cls))
                continue;
            for (int c = every_count ? 0 : 2; c < (every_count ? NCOUNTS : 3); c++)
                reduce_checked(comm, &types[k], &ops[o], o, counts[c], 0, cname);
            reduce_checked(comm, &types[k], &ops[o], o, 7, 1, cname);
        }
    }
}

/* MINLOC and MAXLOC (5.9.4) on the pair types: the value and the smallest index that has it. */
struct di { double v; int i; };
struct li { long v; int i; };
struct si { short v; int i; };
struct ii { int v; int i; };
struct fi { float v; int i; };
struct ldi { long double v; int i; };

#define PAIRS(S, TYPE, NAME)                                                              \
    do {                                                                                  \
        S send[31], recv[31];                                                             \
        for (int mx = 0; mx < 2; mx++)                                                    \
            for (int inplace = 0; inplace < 2; inplace++) {                               \
                for (int i = 0; i < 31; i++) {                                            \
                    send[i].v = (cme * 5 + i * 3) % 7;                                    \
                    send[i].i = cme;                                                      \
                    recv[i] = send[i];                                                    \
                }                                                                         \
                int mine;                                                                 \
                OK(reduction(inplace ? MPI_IN_PLACE : (void *)send, recv, 31, TYPE,       \
                             mx ? MPI_MAXLOC : MPI_MINLOC, comm, &mine));                 \
                counted(comm);                                                            \
                for (int i = 0; mine && i < 31; i++) {                                    \
                    int wv = (i * 3) % 7, wi = 0;                                         \
                    for (int q = 1; q < cn; q++) {                                        \
                        int v = (q * 5 + i * 3) % 7;                                      \
                        if (mx ? v > wv : v < wv) {                                       \
                            wv = v;                                                       \
                            wi = q;                                                       \
                        }                                                                 \
                    }                                                                     \
                    CHECK(recv[i].v == wv && recv[i].i == wi,                             \
                          "%s of %s on %s element %d: (%g, %d), not (%d, %d)",            \
                          mx ? "MAXLOC" : "MINLOC", NAME, cname, i, (double)recv[i].v,    \
                          recv[i].i, wv, wi);                                             \
                }                                                                         \
            }                                                                             \
    } while (0)

static void reduce_pairs(MPI_Comm comm, const char *cname) {
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    PAIRS(struct di, MPI_DOUBLE_INT, "MPI_DOUBLE_INT");
    PAIRS(struct li, MPI_LONG_INT, "MPI_LONG_INT");
    PAIRS(struct si, MPI_SHORT_INT, "MPI_SHORT_INT");
    PAIRS(struct ii, MPI_2INT, "MPI_2INT");
    PAIRS(struct fi, MPI_FLOAT_INT, "MPI_FLOAT_INT");
    PAIRS(struct ldi, MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT");
}

/* Derived types (5.9.2: predefined ops work only with the predefined types it lists, so on a
 * derived type they are an error) and a user-defined op on a vector with holes: every element
 * the type map covers reduced, every hole of the receive buffer untouched. */
static void vsum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    double *a = in, *b = inout;
    for (int k = 0; k < *len; k++)
        for (int j = 0; j < 4; j++)
            b[10 * k + 3 * j] += a[10 * k + 3 * j];
}

static void reduce_derived(MPI_Comm comm, const char *cname) {
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    MPI_Datatype vec, con;
    MPI_Op op;
    OK(MPI_Type_vector(4, 1, 3, MPI_DOUBLE, &vec)); /* 4 doubles, 2 holes after each of 3 */
    OK(MPI_Type_commit(&vec));
    OK(MPI_Type_contiguous(3, MPI_INT, &con));
    OK(MPI_Type_commit(&con));
    OK(MPI_Op_create(vsum, 1, &op));
    int x[21] = {0}, y[21], mine;
    int rc = reduction(x, y, 7, con, MPI_MAX, comm, &mine);
    counted(comm);
    CHECK(rc != MPI_SUCCESS || !mine, "MPI_MAX on a contiguous type on %s succeeded", cname);
    for (int count = 0; count <= 7; count += 7) {
        int len = count * 10;
        double *s = malloc((size_t)(len + 1) * sizeof *s), *r = malloc((size_t)(len + 1) * sizeof *r);
        CHECK(s != NULL && r != NULL, "out of memory");
        for (int i = 0; i < len; i++) {
            s[i] = (cme + i) % 3;
            r[i] = -1000 - i;
        }
        OK(reduction(s, r, count, vec, op, comm, &mine));
        counted(comm);
        for (int i = 0; mine && i < len; i++) {
            double want = -1000 - i;
            if ((i % 10) % 3 == 0) {
                want = 0;
                for (int q = 0; q < cn; q++)
                    want += (q + i) % 3;
            }
            CHECK(r[i] == want, "user op on a vector on %s: element %d is %g, not %g", cname,
                  i, r[i], want);
        }
        free(s);
        free(r);
    }
    MPI_Type_free(&vec);
    MPI_Type_free(&con);
    MPI_Op_free(&op);
}

/* User-defined ops (5.9.5). A non-commutative one must be applied in rank order:
 * x0 * x1 * ... * x(n-1) for 2x2 matrices of unsigned ints (products mod 2^32 are exact in C,
 * and do not commute). A commutative one: element-wise maximum of absolute values. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    unsigned *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        unsigned c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                         a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* Affine maps x -> a*x + b (mod 2^32), a in the high and b in the low 32 bits of a uint64_t:
 * composition is associative and not commutative, and works element by element, so an MPI
 * may cut the buffer anywhere. in o inout: x -> a1*(a2*x + b2) + b1. */
static void affine(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    uint64_t *f = in, *g = inout;
    for (int k = 0; k < *len; k++) {
        uint32_t a1 = (uint32_t)(f[k] >> 32), b1 = (uint32_t)f[k];
        uint32_t a2 = (uint32_t)(g[k] >> 32), b2 = (uint32_t)g[k];
        g[k] = (uint64_t)(a1 * a2) << 32 | (uint32_t)(a1 * b2 + b1);
    }
}

static uint64_t affine_of(int r, int k) {
    return (uint64_t)(uint32_t)(2 * r + 3 + k % 5) << 32 | (uint32_t)(r * 7 + k + 1);
}

static void absmax(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++)
        b[k] = abs(a[k]) > abs(b[k]) ? abs(a[k]) : abs(b[k]);
}

static void matrix_of(int r, int k, unsigned m[4]) {
    m[0] = (unsigned)(r + 1 + k % 3);
    m[1] = 1;
    m[2] = (unsigned)(k % 2 + 1);
    m[3] = (unsigned)((r * k) % 3);
}

static void reduce_user(MPI_Comm comm, const char *cname) {
    int cme, cn;
    OK(MPI_Comm_rank(comm, &cme));
    OK(MPI_Comm_size(comm, &cn));
    MPI_Op mm, am, af;
    MPI_Datatype mat;
    OK(MPI_Op_create(matmul, 0, &mm));
    OK(MPI_Op_create(affine, 0, &af));
    OK(MPI_Op_create(absmax, 1, &am));
    OK(MPI_Type_contiguous(4, MPI_UNSIGNED, &mat));
    OK(MPI_Type_commit(&mat));
    for (int c = 0; c < NCOUNTS; c++) {
        int count = counts[c];
        unsigned *s = malloc((size_t)(4 * count + 4) * sizeof *s);
        unsigned *r = malloc((size_t)(4 * count + 4) * sizeof *r);
        CHECK(s != NULL && r != NULL, "out of memory");
        for (int k = 0; k < count; k++)
            matrix_of(cme, k, s + 4 * k);
        int mine;
        OK(reduction(s, r, count, mat, mm, comm, &mine));
        counted(comm);
        for (int k = 0; mine && k < count; k++) {
            unsigned want[4], m[4];
            matrix_of(0, k, want);
            for (int q = 1; q < cn; q++) {
                /* want = want * m_q: matmul(in, inout) computes in * inout. */
                matrix_of(q, k, m);
                int one = 1;
                matmul(want, m, &one, NULL);
                memcpy(want, m, sizeof want);
            }
            CHECK(memcmp(want, r + 4 * k, sizeof want) == 0,
                  "non-commutative op on %s, count %d: matrix %d is [%u %u; %u %u], not the "
                  "product in rank order [%u %u; %u %u]",
                  cname, count, k, r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3],
                  want[0], want[1], want[2], want[3]);
        }
        /* The same order on a predefined type. */
        uint64_t *fs = malloc((size_t)(count + 1) * sizeof *fs);
        uint64_t *fr = malloc((size_t)(count + 1) * sizeof *fr);
        CHECK(fs != NULL && fr != NULL, "out of memory");
        for (int k = 0; k < count; k++)
            fs[k] = affine_of(cme, k);
        OK(reduction(fs, fr, count, MPI_UINT64_T, af, comm, &mine));
        counted(comm);
        for (int k = 0; mine && k < count; k++) {
            uint64_t want = affine_of(cn - 1, k);
            int one = 1;
            for (int q = cn - 2; q >= 0; q--) {
                uint64_t f = affine_of(q, k);
                affine(&f, &want, &one, NULL);
            }
            CHECK(fr[k] == want,
                  "non-commutative op on MPI_UINT64_T on %s, count %d: element %d is %#llx, "
                  "not the composition in rank order %#llx",
                  cname, count, k, (unsigned long long)fr[k], (unsigned long long)want);
        }
        free(fs);
        free(fr);
        int *a = malloc((size_t)(count + 1) * sizeof *a);
        CHECK(a != NULL, "out of memory");
        for (int k = 0; k < count; k++)
            a[k] = (cme % 2 ? -1 : 1) * ((cme * 3 + k) % 10);
        OK(reduction(MPI_IN_PLACE, a, count, MPI_INT, am, comm, &mine));
        counted(comm);
        for (int k = 0; mine && k < count; k++) {
            int want = 0;
            for (int q = 0; q < cn; q++)
                want = (q * 3 + k) % 10 > want ? (q * 3 + k) % 10 : want;
            CHECK(a[k] == want, "commutative op on %s: %d is %d, not %d", cname, k, a[k], want);
        }
        free(s);
        free(r);
        free(a);
    }
    MPI_Type_free(&mat);
    MPI_Op_free(&mm);
    MPI_Op_free(&am);
    MPI_Op_free(&af);
}

/* 5.9.2 defines MPI_SUM for no pair type and MPI_MAXLOC only for them: both are errors (with
 * MPI_ERRORS_RETURN, an error code), and the next reduction is right. */
static void reduce_errors(MPI_Comm comm, const char *cname) {
    int cn;
    OK(MPI_Comm_size(comm, &cn));
    struct di p[3] = {{1, 0}, {2, 0}, {3, 0}}, q[3];
    int mine;
    int rc = reduction(p, q, 3, MPI_DOUBLE_INT, MPI_SUM, comm, &mine);
    counted(comm);
    CHECK(rc != MPI_SUCCESS || !mine, "MPI_SUM on MPI_DOUBLE_INT on %s succeeded", cname);
    int x[3] = {1, 2, 3}, y[3];
    rc = reduction(x, y, 3, MPI_INT, MPI_MAXLOC, comm, &mine);
    counted(comm);
    CHECK(rc != MPI_SUCCESS || !mine, "MPI_MAXLOC on MPI_INT on %s succeeded", cname);
    OK(reduction(x, y, 3, MPI_INT, MPI_SUM, comm, &mine));
    counted(comm);
    for (int i = 0; mine && i < 3; i++)
        CHECK(y[i] == x[i] * cn, "the reduction after the errors on %s: %d", cname, y[i]);
}

/* Intercommunicators (5.2.2): an allgather gathers the remote group's parts, an allreduce
 * reduces the remote group's contributions. */
static void intercomm(MPI_Comm half) {
    if (n < 2)
        return;
    MPI_Comm inter;
    OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, me % 2 == 0 ? 1 : 0, 78, &inter));
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int hme, rn;
    MPI_Comm_rank(half, &hme);
    MPI_Comm_remote_size(inter, &rn);
    int side = me % 2;
    int v[3] = {100 * side + hme, 7, 1000 * side + hme};
    int *all = malloc(3 * (size_t)rn * sizeof *all);
    CHECK(all != NULL, "out of memory");
    OK(MPI_Allgather(v, 3, MPI_INT, all, 3, MPI_INT, inter));
    counted(inter);
    for (int q = 0; q < rn; q++)
        CHECK(all[3 * q] == 100 * (1 - side) + q && all[3 * q + 1] == 7 &&
                  all[3 * q + 2] == 1000 * (1 - side) + q,
              "intercommunicator allgather: the remote rank %d's part is wrong", q);
    int s[2] = {hme + 1, side}, r[2];
    OK(MPI_Allreduce(s, r, 2, MPI_INT, MPI_SUM, inter));
    counted(inter);
    CHECK(r[0] == rn * (rn + 1) / 2 && r[1] == rn * (1 - side),
          "intercommunicator allreduce: (%d, %d)", r[0], r[1]);
    free(all);
    MPI_Comm_free(&inter);
}

/* MPI_SUM of doubles whose rounding depends on the order: is the result bitwise the same on
 * every rank? */
static void identity(void) {
    enum { COUNT = 1031 };
    double *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    double *all = me == 0 ? malloc((size_t)n * COUNT * sizeof *all) : NULL;
    CHECK(x != NULL && y != NULL && (me != 0 || all != NULL), "out of memory");
    int differ = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < COUNT; i++) {
            static const double mag[] = {1e16, 1.0, 1e-16, 3.14159, 1e8, 2.5e-3, 7e15, 1e-8};
            double sign = (me + i + round) % 3 == 0 ? -1 : 1;
            x[i] = sign * mag[(me * 3 + i + round) % 8] * (1 + 0.1 * ((me + i) % 7));
        }
        OK(MPI_Allreduce(x, y, COUNT, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        counted(MPI_COMM_WORLD);
        OK(MPI_Gather(y, COUNT, MPI_DOUBLE, all, COUNT, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (me == 0)
            for (int r = 1; r < n; r++)
                differ += memcmp(all, all + (size_t)r * COUNT, COUNT * sizeof *all) != 0;
    }
    if (me == 0) {
        if (differ == 0)
            printf("identity identical\n");
        else
            printf("identity differs on %d rank-rounds\n", differ);
        fflush(stdout);
    }
    free(x);
    free(y);
    free(all);
}

/* Counts that disagree across ranks (erroneous): every rank whose parts' lengths disagree with
 * its own counts gets MPI_ERR_TRUNCATE (of MPI_Reduce, the root: the only rank that receives
 * the parts), and the next calls are right. */
static void mismatch(void) {
    int bad = n - 1;
    for (int variant = 0; variant < 3; variant++) {
        int count = me == bad ? 3 : 5;
        int v[5] = {me, me, me, me, me}, all[5 * 64], w[5];
        CHECK(n <= 64, "at most 64 ranks");
        int rc = variant == 0   ? MPI_Allgather(v, count, MPI_INT, all, count, MPI_INT,
                                                MPI_COMM_WORLD)
                 : variant == 1 ? MPI_Allreduce(v, w, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD)
                                : MPI_Reduce(v, w, count, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        counted(MPI_COMM_WORLD);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        if (variant < 2 || me == 0)
            CHECK(cls == MPI_ERR_TRUNCATE, "mismatch variant %d: error class %d, not "
                  "MPI_ERR_TRUNCATE (%d)", variant, cls, MPI_ERR_TRUNCATE);
        for (int k = 0; k < 5; k++) {
            int x[4] = {me + k, 2, 3, 4};
            OK(MPI_Allgather(x, 4, MPI_INT, all, 4, MPI_INT, MPI_COMM_WORLD));
            counted(MPI_COMM_WORLD);
            for (int q = 0; q < n; q++)
                CHECK(all[4 * q] == q + k && all[4 * q + 3] == 4,
                      "after mismatch %d: allgather %d part %d is wrong", variant, k, q);
            OK(MPI_Allreduce(x, w, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
            counted(MPI_COMM_WORLD);
            CHECK(w[0] == n * (n - 1) / 2 + n * k && w[1] == 2 * n,
                  "after mismatch %d: allreduce %d is wrong", variant, k);
        }
    }
    /* MPI_IN_PLACE in MPI_Reduce at a rank other than the root (erroneous: 5.9.1 allows it at
     * the root alone): no rank hangs, the root and that rank get an error (that rank's class
     * depends on whether its part is checked on its host: MPI_ERR_BUFFER or MPI_ERR_TRUNCATE),
     * and the next call is right. */
    if (n > 1) {
        int v[5] = {me, me, me, me, me}, w[5];
        int rc = MPI_Reduce(me == bad ? MPI_IN_PLACE : v, w, 5, MPI_INT, MPI_SUM, 0,
                            MPI_COMM_WORLD);
        counted(MPI_COMM_WORLD);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        if (me == 0)
            CHECK(cls == MPI_ERR_TRUNCATE, "MPI_IN_PLACE at rank %d: the root's error class is "
                  "%d, not MPI_ERR_TRUNCATE (%d)", bad, cls, MPI_ERR_TRUNCATE);
        else if (me == bad)
            CHECK(cls == MPI_ERR_BUFFER || cls == MPI_ERR_TRUNCATE, "MPI_IN_PLACE at rank %d, "
                  "not the root: error class %d", bad, cls);
        else
            CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "MPI_IN_PLACE at rank %d: "
                  "rank %d's error class %d", bad, me, cls);
        OK(MPI_Reduce(v, w, 5, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
        counted(MPI_COMM_WORLD);
        if (me == 0)
            CHECK(w[0] == n * (n - 1) / 2 && w[4] == n * (n - 1) / 2,
                  "after MPI_IN_PLACE at a rank not the root: %d", w[0]);
    }
}

/* A stream of allgathers, allreduces and reduces (to a root that moves) of changing lengths
 * (up to 2.8 KB per rank), every element checked: what the test runs while the switch drops
 * frames. */
static void stream(void) {
    int *send = malloc(700 * sizeof *send), *recv = malloc(700 * (size_t)n * sizeof *recv);
    int *sum = malloc(700 * sizeof *sum);
    CHECK(send != NULL && recv != NULL && sum != NULL, "out of memory");
    for (int k = 0; k < 300; k++) {
        int count = 1 + (k * 37) % 700;
        for (int i = 0; i < count; i++)
            send[i] = me * 1000000 + k * 1000 + i;
        OK(MPI_Allgather(send, count, MPI_INT, recv, count, MPI_INT, MPI_COMM_WORLD));
        counted(MPI_COMM_WORLD);
        for (int q = 0; q < n; q++)
            for (int i = 0; i < count; i++)
                CHECK(recv[q * count + i] == q * 1000000 + k * 1000 + i,
                      "stream allgather %d: rank %d's element %d is %d", k, q, i,
                      recv[q * count + i]);
        OK(MPI_Allreduce(send, sum, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        counted(MPI_COMM_WORLD);
        for (int i = 0; i < count; i++)
            CHECK(sum[i] == n * (n - 1) / 2 * 1000000 + n * (k * 1000 + i),
                  "stream allreduce %d: element %d is %d", k, i, sum[i]);
        int root = k % n;
        memset(sum, 0, (size_t)count * sizeof *sum);
        OK(MPI_Reduce(send, sum, count, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        counted(MPI_COMM_WORLD);
        for (int i = 0; me == root && i < count; i++)
            CHECK(sum[i] == n * (n - 1) / 2 * 1000000 + n * (k * 1000 + i),
                  "stream reduce %d to rank %d: element %d is %d", k, root, i, sum[i]);
    }
    free(send);
    free(recv);
    free(sum);
}

/* The reductions again as MPI_Reduce, to a root that moves (see `reduction`): on the world
 * (every count or count 7 alone) and with user-defined ops on `half`. */
static void reduce_rooted(MPI_Comm half, int every_count) {
    rooted = 1;
    reduce_predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", every_count);
    reduce_pairs(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    reduce_derived(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    reduce_user(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    reduce_errors(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    reduce_user(half, "a half");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "--identity") == 0) {
        identity();
    } else if (strcmp(mode, "--stream") == 0) {
        stream();
    } else if (strcmp(mode, "--mismatch") == 0) {
        mismatch();
    } else if (strcmp(mode, "--light") == 0) {
        /* For an MPI whose ranks busy-poll (MPICH on 2 cores): every type and op at count 7,
         * and every other kind of case once. */
        MPI_Comm half;
        gather_predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", 0);
        gather_derived(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        gather_mixed(MPI_COMM_WORLD);
        reduce_predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", 0);
        reduce_pairs(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_derived(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_user(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_errors(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        OK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half));
        MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN);
        reduce_user(half, "a half");
        reduce_user(MPI_COMM_SELF, "MPI_COMM_SELF");
        intercomm(half);
        reduce_rooted(half, 0);
        MPI_Comm_free(&half);
    } else {
        /* No argument (or --all): everything. */
        gather_predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", 1);
        gather_derived(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        gather_mixed(MPI_COMM_WORLD);
        reduce_predefined(MPI_COMM_WORLD, "MPI_COMM_WORLD", 1);
        reduce_pairs(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_derived(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_user(MPI_COMM_WORLD, "MPI_COMM_WORLD");
        reduce_errors(MPI_COMM_WORLD, "MPI_COMM_WORLD");

        MPI_Comm dup, half, reversed;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        gather_predefined(dup, "a duplicate", 0);
        gather_derived(dup, "a duplicate");
        reduce_predefined(dup, "a duplicate", 0);
        reduce_user(dup, "a duplicate");
        reduce_errors(dup, "a duplicate");

        /* Two halves at the same time. */
        OK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half));
        MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN);
        gather_predefined(half, "a half", 0);
        reduce_predefined(half, "a half", 0);
        reduce_user(half, "a half");

        /* The world in reverse order: the same group, other ranks (and another order). */
        OK(MPI_Comm_split(MPI_COMM_WORLD, 0, n - me, &reversed));
        MPI_Comm_set_errhandler(reversed, MPI_ERRORS_RETURN);
        gather_derived(reversed, "the world reversed");
        reduce_pairs(reversed, "the world reversed");
        reduce_user(reversed, "the world reversed");

        gather_derived(MPI_COMM_SELF, "MPI_COMM_SELF");
        reduce_user(MPI_COMM_SELF, "MPI_COMM_SELF");
        reduce_pairs(MPI_COMM_SELF, "MPI_COMM_SELF");

        intercomm(half);

        reduce_rooted(half, 1);
        reduce_user(reversed, "the world reversed");
        reduce_pairs(MPI_COMM_SELF, "MPI_COMM_SELF");
        MPI_Comm_free(&dup);
        MPI_Comm_free(&half);
        MPI_Comm_free(&reversed);
    }
    printf("coll rank %d world %d calls %lu congruent %lu\n", me, n, calls, congruent);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
