/* A rank that waits in a collective lets its other MPI communication progress (MPI 3.1, 3.5
 * "Progress": a send whose matching receive is posted completes, whatever the receiving rank
 * does next, as long as it is in an MPI call). Two shapes, three rounds each:
 *
 * - Barrier: rank 0 posts a receive from every other rank and enters MPI_Barrier; the others
 *   send it 1 MiB with MPI_Ssend (which returns only once rank 0's MPI has matched the
 *   message) and only then enter the barrier. Rank 0's MPI must progress while rank 0 waits in
 *   the barrier, or nobody else reaches it.
 * - Broadcast: every other rank posts a receive from rank 0 and enters MPI_Bcast from root 0;
 *   rank 0 first sends each of them 1 MiB with MPI_Ssend, then broadcasts. Each receiver's MPI
 *   must progress while it waits in the broadcast.
 *
 * Every byte is checked. Prints "progress rank R ok" and exits 0, or aborts naming what was
 * wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN (1 << 20)
#define ROUNDS 3

static unsigned char pattern(int from, int round, size_t i) {
    return (unsigned char)(i * 7 + (size_t)from * 31 + (size_t)round * 101);
}

static void fill(unsigned char *buf, int from, int round) {
    for (size_t i = 0; i < LEN; i++)
        buf[i] = pattern(from, round, i);
}

static void check(const unsigned char *buf, int from, int round, int me, const char *what) {
    for (size_t i = 0; i < LEN; i++) {
        if (buf[i] != pattern(from, round, i)) {
            fprintf(stderr, "progress rank %d: %s from rank %d, round %d: byte %zu wrong\n", me,
                    what, from, round, i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n < 2) {
        fprintf(stderr, "progress: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    unsigned char *bufs = malloc((size_t)n * LEN);
    MPI_Request *reqs = malloc((size_t)n * sizeof *reqs);
    if (bufs == NULL || reqs == NULL) {
        fprintf(stderr, "progress rank %d: out of memory\n", me);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int round = 0; round < ROUNDS; round++) {
        /* Barrier. */
        if (me == 0) {
            for (int p = 1; p < n; p++)
                MPI_Irecv(bufs + (size_t)p * LEN, LEN, MPI_UNSIGNED_CHAR, p, round,
                          MPI_COMM_WORLD, &reqs[p]);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int p = 1; p < n; p++) {
                MPI_Status st;
                MPI_Wait(&reqs[p], &st);
            }
            for (int p = 1; p < n; p++)
                check(bufs + (size_t)p * LEN, p, round, me, "send before the barrier");
        } else {
            fill(bufs, me, round);
            MPI_Ssend(bufs, LEN, MPI_UNSIGNED_CHAR, 0, round, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        /* Broadcast. */
        unsigned long long word = 0;
        if (me == 0) {
            for (int p = 1; p < n; p++) {
                fill(bufs + (size_t)p * LEN, 0, round + p);
                MPI_Ssend(bufs + (size_t)p * LEN, LEN, MPI_UNSIGNED_CHAR, p, ROUNDS + round,
                          MPI_COMM_WORLD);
            }
            word = 0x0123456789abcdefULL + (unsigned long long)round;
            MPI_Bcast(&word, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        } else {
            MPI_Request r;
            MPI_Irecv(bufs, LEN, MPI_UNSIGNED_CHAR, 0, ROUNDS + round, MPI_COMM_WORLD, &r);
            MPI_Bcast(&word, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
            MPI_Status st;
            MPI_Wait(&r, &st);
            check(bufs, 0, round + me, me, "send before the broadcast");
            if (word != 0x0123456789abcdefULL + (unsigned long long)round) {
                fprintf(stderr, "progress rank %d: round %d: broadcast word wrong\n", me, round);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    }
    printf("progress rank %d ok\n", me);
    free(reqs);
    free(bufs);
    MPI_Finalize();
    return 0;
}
