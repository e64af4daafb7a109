/* Test program of the MPI interposer (run by capi/tests/mpi_interposer.rs under mpirun, with
 * and without the interposer): every result is checked byte by byte.
 *
 * - MPI_Bcast on MPI_COMM_WORLD, 1 B to 64 KiB, every rank as root, MPI_BYTE/INT/DOUBLE;
 * - the same on a duplicate of MPI_COMM_WORLD (congruent: the interposer takes it too);
 * - MPI_Bcast and MPI_Barrier on halves from MPI_Comm_split (not congruent: PMPI);
 * - a derived datatype (MPI_Type_vector) on MPI_COMM_WORLD at every rank, and mixed: the
 *   root sends the vector while the others receive the same signature as plain MPI_INT;
 * - MPI_Barrier on MPI_COMM_WORLD and on the duplicate.
 * With --quick: two lengths (8 B, 4 KiB) and 5 rounds of barriers (for slow fallbacks).
 * Prints "ok rank R world W congruent C other O" (how many broadcast and barrier calls went to
 * communicators congruent to MPI_COMM_WORLD and to others) or exits 1 with the reason. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, n;
static unsigned long congruent_calls, other_calls;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank %d: ", me);                                              \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

static unsigned char pattern(int root, size_t len, size_t i, int salt) {
    return (unsigned char)(root * 37u + len * 11u + i * 13u + (i >> 9) + (unsigned)salt * 101u);
}

/* Broadcasts `len` bytes as `count` elements of `type` (a predefined type) on `comm` from
 * every root of comm, and checks every byte. */
static void bcast_all_roots(MPI_Comm comm, MPI_Datatype type, int elem, size_t len, int salt) {
    int cme, cn;
    MPI_Comm_rank(comm, &cme);
    MPI_Comm_size(comm, &cn);
    len = len / (size_t)elem * (size_t)elem;
    unsigned char *buf = malloc(len + 1);
    for (int root = 0; root < cn; root++) {
        for (size_t i = 0; i < len; i++)
            buf[i] = cme == root ? pattern(root, len, i, salt) : (unsigned char)~pattern(root, len, i, salt);
        CHECK(MPI_Bcast(buf, (int)(len / (size_t)elem), type, root, comm) == MPI_SUCCESS,
              "MPI_Bcast failed");
        for (size_t i = 0; i < len; i++)
            CHECK(buf[i] == pattern(root, len, i, salt), "salt %d root %d len %zu byte %zu: %u", salt,
                  root, len, i, buf[i]);
    }
    free(buf);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const size_t lens_full[] = {8, 256, 1460, 4096, 65536}, lens_quick[] = {8, 4096};
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const size_t *lens = quick ? lens_quick : lens_full;
    size_t nlens = quick ? 2 : 5;
    int barrier_rounds = quick ? 5 : 20;
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, me % 2, n - me, &half); /* reversed order, too */
    int hn;
    MPI_Comm_size(half, &hn);

    for (size_t k = 0; k < nlens; k++) {
        bcast_all_roots(MPI_COMM_WORLD, MPI_BYTE, 1, lens[k], 1);
        bcast_all_roots(MPI_COMM_WORLD, MPI_INT, 4, lens[k], 2);
        bcast_all_roots(dup, MPI_DOUBLE, 8, lens[k], 3);
        bcast_all_roots(half, MPI_BYTE, 1, lens[k], 4);
        congruent_calls += 3 * (unsigned long)n;
        other_calls += (unsigned long)hn;
    }
    bcast_all_roots(MPI_COMM_WORLD, MPI_BYTE, 1, 1, 5);
    congruent_calls += (unsigned long)n;

    /* A strided vector: 16 blocks of 2 ints, stride 3; the gaps must stay untouched. */
    MPI_Datatype vec;
    MPI_Type_vector(16, 2, 3, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    for (int root = 0; root < n; root++) {
        int v[48];
        for (int i = 0; i < 48; i++)
            v[i] = me == root ? root * 1000 + i : -1;
        CHECK(MPI_Bcast(v, 1, vec, root, MPI_COMM_WORLD) == MPI_SUCCESS, "vector bcast");
        for (int i = 0; i < 48; i++)
            CHECK(v[i] == (i % 3 == 2 && me != root ? -1 : root * 1000 + i),
                  "vector root %d element %d: %d", root, i, v[i]);
        /* Mixed: the root sends the vector, the others receive 32 plain ints. */
        int plain[32];
        for (int i = 0; i < 32; i++)
            plain[i] = -7;
        if (me == root)
            CHECK(MPI_Bcast(v, 1, vec, root, MPI_COMM_WORLD) == MPI_SUCCESS, "mixed root");
        else
            CHECK(MPI_Bcast(plain, 32, MPI_INT, root, MPI_COMM_WORLD) == MPI_SUCCESS, "mixed");
        if (me != root)
            for (int b = 0; b < 16; b++)
                for (int j = 0; j < 2; j++)
                    CHECK(plain[b * 2 + j] == root * 1000 + b * 3 + j,
                          "mixed root %d element %d: %d", root, b * 2 + j, plain[b * 2 + j]);
        congruent_calls += 2;
    }
    MPI_Type_free(&vec);

    for (int i = 0; i < barrier_rounds; i++) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");
        CHECK(MPI_Barrier(dup) == MPI_SUCCESS, "barrier dup");
        CHECK(MPI_Barrier(half) == MPI_SUCCESS, "barrier half");
        congruent_calls += 2;
        other_calls += 1;
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    printf("ok rank %d world %d congruent %lu other %lu\n", me, n, congruent_calls, other_calls);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
