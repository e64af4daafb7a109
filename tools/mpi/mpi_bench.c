/* MPI collective latency, the EQA paper's method, for `ethbcast-bench mpi`: MPI_Bcast,
 * MPI_Allgather, MPI_Allreduce and MPI_Reduce to rank 0 (ints, MPI_SUM), MPI_Alltoall and
 * MPI_Barrier; and the point-to-point latency of ranks 0 and 1 (`latency`: MPI_Send/MPI_Recv
 * ping-pong, half the round trip as osu_latency reports it; the other ranks wait in the
 * out-of-band barrier).
 *
 * Usage: mpi_bench SYNC_FILE [ITERS [WARMUP [SIZES...]]]
 * MPI_BENCH_OPS=bcast,allgather,allreduce,reduce,alltoall,barrier,latency chooses the
 * operations (default bcast,barrier); sizes are bytes per rank (allreduce, reduce: of ints, at
 * least one).
 * A ping-pong is never separated by MPI_Barrier: osu_latency's loop runs back to back.
 * MPI_BENCH_SEPARATE=mpi separates iterations with MPI_Barrier, as the OSU micro-benchmarks do,
 * and reports their average latency (every rank's own time in the call, averaged over ranks).
 *
 * Built with each implementation's mpicc and run under its mpirun, with and without the
 * ethbcast interposer. All ranks run on one machine (the test-bed's network namespaces), so
 * they share CLOCK_MONOTONIC: the latency of one broadcast runs from the root's call until
 * the LAST rank returned with the whole message; of one barrier (allgather, allreduce,
 * alltoall), from the last rank entering to the last rank leaving. Before every iteration the ranks meet out of band, in a barrier
 * on a shared-memory file (SYNC_FILE, futexes), never over MPI or the network, so that the
 * separation costs the same with every MPI and iterations never overlap.
 *
 * Every rank checks every byte of every broadcast (the root's pattern depends on size and
 * iteration). Rank 0 prints one JSON line per (op, size):
 *   {"op":"bcast","size":8,"ranks":8,"verified":true,"samples_us":[...]}
 * with the ITERS measured samples; ethbcast-bench computes mean80, median and p99. With
 * MPI_BENCH_SEPARATE=mpi the line also has "entry_skew_us" (per iteration, the last rank's
 * entry into the call less the first's) and "entry_lag_us" (per rank, its mean entry behind
 * the first rank's). A collective's line has "cpu_us" and "context_switches": the CPU time
 * (every thread, user and system) and the context switches of all ranks over the measured
 * iterations, separation and checks included: the work the loop costs the machine; and
 * "loop_us", the longest any rank took for all of them, from the first one's separation to
 * the last one's check. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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

/* This process's CPU time (every thread's, user and system) in µs, its context switches
 * (voluntary and involuntary), and the clock in µs. */
static void usage_now(double *work) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    work[0] = (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
              (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    work[1] = (double)(u.ru_nvcsw + u.ru_nivcsw);
    work[2] = now_us();
}

static unsigned char pattern(size_t size, int iter, size_t i) {
    return (unsigned char)(size * 3u + (unsigned)iter * 7u + i * 31u + (i >> 8));
}

static void report(const char *op, size_t size, int ok, const double *lat, const double *skew,
                   const double *lag, const double *work, int iters) {
    printf("{\"op\":\"%s\",\"size\":%zu,\"ranks\":%d,\"verified\":%s,\"samples_us\":[", op, size,
           n, ok ? "true" : "false");
    for (int i = 0; i < iters; i++)
        printf("%s%.3f", i ? "," : "", lat[i]);
    printf("]");
    if (skew != NULL) {
        printf(",\"entry_skew_us\":[");
        for (int i = 0; i < iters; i++)
            printf("%s%.3f", i ? "," : "", skew[i]);
        printf("]");
    }
    if (lag != NULL) {
        printf(",\"entry_lag_us\":[");
        for (int r = 0; r < n; r++)
            printf("%s%.3f", r ? "," : "", lag[r]);
        printf("]");
    }
    if (work != NULL)
        printf(",\"cpu_us\":%.1f,\"context_switches\":%.0f,\"loop_us\":%.1f", work[0],
               work[1], work[2]);
    printf("}\n");
    fflush(stdout);
}

/* osu_latency's loop between ranks 0 and 1: rank 0 sends `size` bytes, rank 1 sends them
 * back; one sample is half the round trip at rank 0. Both check every byte. With `osu` the
 * ping-pongs run back to back after one MPI_Barrier, as osu_latency's do; otherwise ranks 0
 * and 1 meet out of band before each. The other ranks take no part. */
static void ping_pong(const size_t *sizes, int nsizes, int iters, int warmup, int osu,
                      double *lat) {
    for (int s = 0; s < nsizes; s++) {
        size_t size = sizes[s];
        unsigned char *buf = malloc(size ? size : 1);
        int ok = 1;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int it = 0; it < warmup + iters; it++) {
            if (!osu)
                oob_barrier();
            if (me > 1)
                continue;
            if (me == 0)
                for (size_t i = 0; i < size; i++)
                    buf[i] = pattern(size, it, i);
            double t0 = now_us();
            if (me == 0) {
                MPI_Send(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < size; i++)
                    ok &= buf[i] == pattern(size, it, i);
                MPI_Send(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
            }
            double t1 = now_us();
            if (me == 0) {
                for (size_t i = 0; i < size; i++)
                    ok &= buf[i] == pattern(size, it, i);
                if (it >= warmup)
                    lat[it - warmup] = (t1 - t0) / 2;
            }
        }
        free(buf);
        int all_ok = 0;
        PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        if (me == 0)
            report("latency", size, all_ok, lat, NULL, NULL, NULL, iters);
    }
}

/* Where the job has no more ranks than the machine has cores, each rank's thread runs on a core
 * of its own, as each host of a cluster has its own CPU (and as `ethbcast-bench latency` runs
 * its hosts): otherwise the scheduler may stack two busy ranks on one core, and whether it does
 * depends on its history, not on the MPI (two Open MPI ranks in a ping-pong on this test-bed
 * took 8.5 us on two cores and 16.5 us on one, from job to job). Larger jobs share the cores as
 * the scheduler likes. */
static void own_core(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1 || n > cores)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    own_core();
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

    /* Which operations (MPI_BENCH_OPS, comma-separated; bcast and barrier by default) and
     * how iterations are separated (MPI_BENCH_SEPARATE: "oob", the futex barrier, or "mpi",
     * an MPI_Barrier as the OSU micro-benchmarks do). */
    const char *ops = getenv("MPI_BENCH_OPS");
    if (ops == NULL || ops[0] == '\0')
        ops = "bcast,barrier";
    const char *sep = getenv("MPI_BENCH_SEPARATE");
    int osu = sep != NULL && strcmp(sep, "mpi") == 0;
    int total = warmup + iters;
    double *t_start = calloc((size_t)iters, sizeof(double));
    double *t_end = calloc((size_t)iters, sizeof(double));
    double *t_max = calloc((size_t)iters, sizeof(double));
    double *t_enter_max = calloc((size_t)iters, sizeof(double));
    double *lat = calloc((size_t)iters, sizeof(double));
    double *skew = calloc((size_t)iters, sizeof(double));
    /* At rank 0, with MPI_BENCH_SEPARATE=mpi: every rank's entries, and each rank's mean lag. */
    double *all_start = me == 0 && osu ? calloc((size_t)iters * (size_t)n, sizeof(double)) : NULL;
    double *lag = me == 0 && osu ? calloc((size_t)n, sizeof(double)) : NULL;
    char *list = strdup(ops);
    for (char *save = NULL, *op = strtok_r(list, ",", &save); op != NULL;
         op = strtok_r(NULL, ",", &save)) {
        int kind = strcmp(op, "bcast") == 0       ? 0
                   : strcmp(op, "allgather") == 0 ? 1
                   : strcmp(op, "allreduce") == 0 ? 2
                   : strcmp(op, "alltoall") == 0  ? 3
                   : strcmp(op, "barrier") == 0   ? 4
                   : strcmp(op, "latency") == 0   ? 5
                   : strcmp(op, "reduce") == 0    ? 6
                                                  : -1;
        if (kind < 0 || (kind == 5 && n < 2)) {
            if (me == 0)
                fprintf(stderr, "mpi_bench: unknown operation %s (or latency with one rank)\n", op);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (kind == 5) {
            ping_pong(sizes, nsizes, iters, warmup, osu, lat);
            continue;
        }
        for (int s = 0; s < (kind == 4 ? 1 : nsizes); s++) {
            size_t size = kind == 4 ? 0 : sizes[s];
            /* allreduce and reduce: ints (at least one); the others: bytes, per rank. */
            int ints = kind == 2 || kind == 6;
            int count = ints ? (int)(size / sizeof(int) > 0 ? size / sizeof(int) : 1)
                             : (int)size;
            size_t in_len = ints ? (size_t)count * sizeof(int)
                            : kind == 3 ? size * (size_t)n
                                        : size;
            size_t out_len = kind == 0 || kind == 4 ? 0
                             : ints              ? in_len
                                                 : size * (size_t)n;
            unsigned char *in = malloc(in_len ? in_len : 1);
            unsigned char *out = malloc(out_len ? out_len : 1);
            int ok = 1;
            /* The work of the measured iterations, separation and checks included: this
             * rank's CPU and context switches from the first one's start to the last one's
             * end. */
            double work_from[3] = {0, 0, 0}, work[3], work_all[3] = {0, 0, 0};
            for (int it = 0; it < total; it++) {
                if (it == warmup)
                    usage_now(work_from);
                if (kind == 0)
                    for (size_t i = 0; i < size; i++)
                        in[i] = me == 0 ? pattern(size, it, i)
                                        : (unsigned char)~pattern(size, it, i);
                else if (kind == 1 || kind == 3)
                    for (size_t i = 0; i < in_len; i++)
                        in[i] = pattern(size, it + me, i);
                else if (ints)
                    for (int i = 0; i < count; i++)
                        ((int *)in)[i] = (me + it + i) % 7;
                if (osu)
                    MPI_Barrier(MPI_COMM_WORLD);
                else
                    oob_barrier();
                double t0 = now_us();
                switch (kind) {
                case 0:
                    MPI_Bcast(in, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
                    break;
                case 1:
                    MPI_Allgather(in, (int)size, MPI_BYTE, out, (int)size, MPI_BYTE,
                                  MPI_COMM_WORLD);
                    break;
                case 2:
                    MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                    break;
                case 6:
                    MPI_Reduce(in, out, count, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
                    break;
                case 3:
                    MPI_Alltoall(in, (int)size, MPI_BYTE, out, (int)size, MPI_BYTE,
                                 MPI_COMM_WORLD);
                    break;
                default:
                    MPI_Barrier(MPI_COMM_WORLD);
                }
                double t1 = now_us();
                if (kind == 0)
                    for (size_t i = 0; i < size; i++)
                        ok &= in[i] == pattern(size, it, i);
                else if (kind == 1)
                    for (int r = 0; r < n; r++)
                        for (size_t i = 0; i < size; i++)
                            ok &= out[(size_t)r * size + i] == pattern(size, it + r, i);
                else if (kind == 2 || (kind == 6 && me == 0))
                    for (int i = 0; i < count; i++) {
                        int want = 0;
                        for (int r = 0; r < n; r++)
                            want += (r + it + i) % 7;
                        ok &= ((int *)out)[i] == want;
                    }
                else if (kind == 3)
                    for (int r = 0; r < n; r++)
                        for (size_t i = 0; i < size; i++)
                            ok &= out[(size_t)r * size + i] ==
                                  pattern(size, it + r, (size_t)me * size + i);
                if (it >= warmup) {
                    t_start[it - warmup] = t0;
                    t_end[it - warmup] = t1;
                }
            }
            usage_now(work);
            for (int k = 0; k < 3; k++)
                work[k] -= work_from[k];
            /* CPU and switches summed over the ranks; the loop's time, the slowest rank's. */
            PMPI_Reduce(work, work_all, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&work[2], &work_all[2], 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            free(in);
            free(out);
            int all_ok = 0;
            PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
            if (osu) {
                /* OSU's average latency: every rank's own time in the call, averaged. And from
                 * every rank's entries, at rank 0: how far apart the ranks entered each call
                 * (the separating barrier's release skew) and each rank's mean entry behind
                 * the first (which ranks it releases late). */
                PMPI_Gather(t_start, iters, MPI_DOUBLE, all_start, iters, MPI_DOUBLE, 0,
                            MPI_COMM_WORLD);
                if (me == 0) {
                    for (int r = 0; r < n; r++)
                        lag[r] = 0;
                    for (int i = 0; i < iters; i++) {
                        double first = all_start[i], last = all_start[i];
                        for (int r = 1; r < n; r++) {
                            double t = all_start[(size_t)r * (size_t)iters + (size_t)i];
                            first = t < first ? t : first;
                            last = t > last ? t : last;
                        }
                        skew[i] = last - first;
                        for (int r = 0; r < n; r++)
                            lag[r] += (all_start[(size_t)r * (size_t)iters + (size_t)i] - first) /
                                      iters;
                    }
                }
                for (int i = 0; i < iters; i++)
                    lat[i] = t_end[i] - t_start[i];
                PMPI_Reduce(lat, t_max, iters, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                for (int i = 0; i < iters; i++)
                    lat[i] = t_max[i] / n;
            } else {
                /* From the root's call (the last rank entering, without a root) to the last
                 * rank leaving. */
                PMPI_Reduce(t_start, t_enter_max, iters, MPI_DOUBLE, MPI_MAX, 0,
                            MPI_COMM_WORLD);
                PMPI_Reduce(t_end, t_max, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                for (int i = 0; i < iters; i++)
                    lat[i] = t_max[i] - (kind == 0 ? t_start[i] : t_enter_max[i]);
            }
            if (me == 0)
                report(op, size, all_ok, lat, osu ? skew : NULL, osu ? lag : NULL, work_all,
                       iters);
        }
    }
    free(list);
    munmap(sync_page, 4096);
    MPI_Finalize();
    return 0;
}
