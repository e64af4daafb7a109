/* MPI_Bcast and MPI_Barrier latency, the EQA paper's method, for `ethbcast-bench mpi`.
 *
 * Usage: mpi_bench SYNC_FILE [ITERS [WARMUP [SIZES...]]]
 *
 * Built with each implementation's mpicc and run under its mpirun, with and without the
 * ethbcast interposer. All ranks run on one machine (the test-bed's network namespaces), so
 * they share CLOCK_MONOTONIC: the latency of one broadcast runs from the root's call until
 * the LAST rank returned with the whole message; of one barrier, from the last rank entering
 * to the last rank leaving. Before every iteration the ranks meet out of band, in a barrier
 * on a shared-memory file (SYNC_FILE, futexes), never over MPI or the network, so that the
 * separation costs the same with every MPI and iterations never overlap.
 *
 * Every rank checks every byte of every broadcast (the root's pattern depends on size and
 * iteration). Rank 0 prints one JSON line per (op, size):
 *   {"op":"bcast","size":8,"ranks":8,"verified":true,"samples_us":[...]}
 * with the ITERS measured samples; ethbcast-bench computes mean80, median and p99. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sync_page {
    _Atomic uint32_t count;
    _Atomic uint32_t generation;
};

static struct sync_page *sync_page;
static int me, n;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Sense-counting barrier on the shared page: the last to arrive bumps the generation and
 * wakes the sleepers. */
static void oob_barrier(void) {
    uint32_t gen = atomic_load(&sync_page->generation);
    if (atomic_fetch_add(&sync_page->count, 1) == (uint32_t)n - 1) {
        atomic_store(&sync_page->count, 0);
        atomic_fetch_add(&sync_page->generation, 1);
        syscall(SYS_futex, &sync_page->generation, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    } else {
        while (atomic_load(&sync_page->generation) == gen)
            syscall(SYS_futex, &sync_page->generation, FUTEX_WAIT, gen, NULL, NULL, 0);
    }
}

static unsigned char pattern(size_t size, int iter, size_t i) {
    return (unsigned char)(size * 3u + (unsigned)iter * 7u + i * 31u + (i >> 8));
}

static void report(const char *op, size_t size, int ok, const double *lat, int iters) {
    printf("{\"op\":\"%s\",\"size\":%zu,\"ranks\":%d,\"verified\":%s,\"samples_us\":[", op, size,
           n, ok ? "true" : "false");
    for (int i = 0; i < iters; i++)
        printf("%s%.3f", i ? "," : "", lat[i]);
    printf("]}\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 2) {
        if (me == 0)
            fprintf(stderr, "usage: mpi_bench SYNC_FILE [ITERS [WARMUP [SIZES...]]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = argc > 2 ? atoi(argv[2]) : 500;
    int warmup = argc > 3 ? atoi(argv[3]) : 50;
    size_t sizes[32] = {8, 64, 256, 1024, 4096, 16384, 65536};
    int nsizes = 7;
    if (argc > 4) {
        nsizes = 0;
        for (int i = 4; i < argc && nsizes < 32; i++)
            sizes[nsizes++] = (size_t)strtoul(argv[i], NULL, 10);
    }
    if (iters < 1 || warmup < 0) {
        fprintf(stderr, "mpi_bench: bad iteration counts\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Rank 0 sizes the file before the others map it. */
    if (me == 0) {
        int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, 4096) != 0) {
            perror("mpi_bench: sync file");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        close(fd);
    }
    PMPI_Barrier(MPI_COMM_WORLD);
    int fd = open(argv[1], O_RDWR);
    sync_page = fd < 0 ? MAP_FAILED
                       : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sync_page == MAP_FAILED) {
        perror("mpi_bench: map the sync file");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    close(fd);

    int total = warmup + iters;
    double *t_start = calloc((size_t)iters, sizeof(double));
    double *t_end = calloc((size_t)iters, sizeof(double));
    double *t_max = calloc((size_t)iters, sizeof(double));
    double *t_enter_max = calloc((size_t)iters, sizeof(double));
    double *lat = calloc((size_t)iters, sizeof(double));
    for (int s = 0; s < nsizes; s++) {
        size_t size = sizes[s];
        unsigned char *buf = malloc(size ? size : 1);
        int ok = 1;
        for (int it = 0; it < total; it++) {
            for (size_t i = 0; i < size; i++)
                buf[i] = me == 0 ? pattern(size, it, i) : (unsigned char)~pattern(size, it, i);
            oob_barrier();
            double t0 = now_us();
            MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
            double t1 = now_us();
            for (size_t i = 0; i < size; i++)
                ok &= buf[i] == pattern(size, it, i);
            if (it >= warmup) {
                t_start[it - warmup] = t0;
                t_end[it - warmup] = t1;
            }
        }
        free(buf);
        int all_ok = 0;
        PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        PMPI_Reduce(t_end, t_max, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (me == 0) {
            for (int i = 0; i < iters; i++)
                lat[i] = t_max[i] - t_start[i];
            report("bcast", size, all_ok, lat, iters);
        }
    }
    for (int it = 0; it < total; it++) {
        oob_barrier();
        double t0 = now_us();
        MPI_Barrier(MPI_COMM_WORLD);
        double t1 = now_us();
        if (it >= warmup) {
            t_start[it - warmup] = t0;
            t_end[it - warmup] = t1;
        }
    }
    PMPI_Reduce(t_start, t_enter_max, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    PMPI_Reduce(t_end, t_max, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (me == 0) {
        for (int i = 0; i < iters; i++)
            lat[i] = t_max[i] - t_enter_max[i];
        report("barrier", 0, 1, lat, iters);
    }
    munmap(sync_page, 4096);
    MPI_Finalize();
    return 0;
}
