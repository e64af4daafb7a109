/* What the MPI test programs of capi/tests/ share: the rank and size of MPI_COMM_WORLD, the
 * count of collective calls and of those on communicators congruent to MPI_COMM_WORLD (the
 * ones the interposer takes), and the checks that abort the job naming the rank. Included by
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

#endif
