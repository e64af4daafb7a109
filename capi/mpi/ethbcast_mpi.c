/* libethbcast_mpi: MPI_Bcast, MPI_Barrier, MPI_Allgather, MPI_Allgatherv, MPI_Allreduce and
 * MPI_Reduce over Ethernet hardware broadcast, for MPI programs as they are (LD_PRELOAD),
 * through the MPI profiling interface (PMPI).
 *
 * Compiled once per MPI implementation with its own mpicc (Open MPI's MPI_Comm is a pointer,
 * MPICH's an int): `bash capi/mpi/build.sh` makes target/mpi/libethbcast_mpi-openmpi.so and
 * target/mpi/libethbcast_mpi-mpich.so. Run with
 *   ETHBCAST_IFACE=eth0 LD_PRELOAD=.../libethbcast_mpi-openmpi.so ./program
 * (mpirun -x / mpiexec -genv pass both to every rank).
 *
 * What goes over ethbcast: those six on MPI_COMM_WORLD and on communicators congruent to it (same members, same order: MPI_Comm_compare gives MPI_IDENT or
 * MPI_CONGRUENT; with MPI_THREAD_MULTIPLE only MPI_COMM_WORLD, since two threads may run
 * collectives on two congruent communicators in different orders on different ranks).
 * Everything else calls the PMPI_ function: other communicators, intercommunicators,
 * invalid arguments (so MPI reports the error as usual), and the whole job when
 * ETHBCAST_IFACE is unset or any rank cannot open it (one warning per job).
 *
 * Several ranks per host: ranks whose ETHBCAST_IFACE has the same MAC address share a host.
 * The lowest of them is the host's member of the network group (one member per host), the
 * others receive through a ring in shared memory (/dev/shm), and a root among them hands its
 * message to that member through the ring.
 *
 * Why the choice depends on the communicator and the number of bytes only, never on the
 * datatype: MPI lets ranks pass different datatypes with the same type signature (the root a
 * vector, the others plain ints). A per-rank choice by datatype would send some ranks to
 * ethbcast and others to PMPI within one broadcast, and they would wait for each other
 * forever. So every rank moves count * MPI_Type_size bytes, the signature's elements in order
 * without holes: a predefined type whose elements lie back to back (size equal to extent and
 * true extent, lower bound 0) straight from the buffer; every other type (derived ones, and
 * the MAXLOC pair types such as MPI_DOUBLE_INT, whose elements have holes) packed with
 * PMPI_Pack and unpacked with PMPI_Unpack, which leaves a receiver's holes untouched.
 *
 * MPI_Allgather(v) is every rank's part broadcast on its own stream, all at once
 * (ethbcast_allgather). MPI_Allreduce is an allgather of every rank's contribution, reduced on
 * every rank with PMPI_Reduce_local in rank order: the same operations on the same bytes in the
 * same order, so every rank has bitwise the same result, floating point included. MPI_Reduce
 * is a gather of the contributions to the root (ethbcast_gather: the others return once their
 * own is sent), reduced at the root in the same order. A predefined op the MPI refuses for the
 * type (MPI_SUM on a pair type, any on a derived type) goes to the MPI's own MPI_Allreduce or
 * MPI_Reduce, which reports it. Above ETHBCAST_MPI_ALLGATHER_MAX_BYTES or
 * ETHBCAST_MPI_ALLREDUCE_MAX_BYTES (MPI_Reduce's too) in all (every rank's part or
 * contribution together), or a
 * part above ETHBCAST_MPI_MAX_BYTES, the MPI's own collective. Unset, the allreduce's limit is
 * 32 KiB on links of 1 Gbit/s or faster (or of unknown rate) and scales with a slower job's
 * link rate (3276 bytes at 100 Mbit/s); the allgather's is 512 KiB, scaled the same way
 * (52428 bytes at 100 Mbit/s).
 *
 * Every broadcast on the group carries its length, zero included: a rank whose count
 * disagrees with the root's gets MPI_ERR_TRUNCATE for that call (through the communicator's
 * error handler), and the call has taken the root's message, so later broadcasts are not
 * shifted. (A mismatch that puts the root and a receiver on different sides of
 * ETHBCAST_MPI_MAX_BYTES cannot be seen by either: the receiver waits for ETHBCAST_TIMEOUT_MS
 * and fails with MPI_ERR_OTHER.)
 *
 * Environment: ETHBCAST_IFACE (required), ETHBCAST_WAIT (patient, adaptive, block, spin,
 * doze; default patient: spin yielding the CPU for up to 2 ms, then block), ETHBCAST_ALGO (simple, pushpull, tree; default simple),
 * ETHBCAST_PROGRESS_THREAD=0 (no progress thread: only for programs that call collectives
 * all the time), ETHBCAST_ROOT_WAITS_ABOVE=BYTES (a root's broadcast longer than this returns
 * once all acknowledged; default: none waits),
 * ETHBCAST_HOST_SPIN_US (ranks sharing a host look again for this long before sleeping on a
 * futex; default 20; "forever": never sleep),
 * ETHBCAST_MPI_MAX_BYTES (broadcasts longer than this go to the MPI's own MPI_Bcast;
 * "unlimited" sends every size over ethbcast; every rank moves the same number of bytes, so
 * every rank makes the same choice; at most 1 GiB, the group's largest message. Unset, it is
 * chosen from the links: when every rank's interface sends at 1 Gbit/s or less (the speed
 * its driver reports, or a root tbf's rate: ethbcast_link_rate), every size goes over
 * ethbcast, which wins there at every size; when any rank's rate is unknown or faster (an
 * unshaped veth reports 10 Gbit/s), 4096, where hardware broadcast still wins on unshaped
 * veths, from 16 KiB on TCP's segmentation offload is faster there), ETHBCAST_TIMEOUT_MS (default 30000), ETHBCAST_GROUP_ID (default: rank 0 draws one
 * per job), ETHBCAST_MPI_VERBOSE=1 (each rank reports at MPI_Finalize how many calls went
 * where: MPI_Bcast and MPI_Barrier, then MPI_Allgather(v), MPI_Allreduce and MPI_Reduce apart). The settings above are the job's: every rank uses rank 0's, and rank 0 names the
 * ranks whose environment said otherwise in one warning per setting.
 *
 * Keys: ETHBCAST_KEY_FILE names the job's key file (written by `ethbcast keygen FILE`, mode
 * 0600, the same on every rank; read by ethbcast_open as the ethbcast command reads --key-file). With
 * a key every frame is authenticated. Without one, any host on the Ethernet segment can write
 * into MPI_Bcast buffers, release barriers or evict ranks: the job still uses ethbcast, and
 * ethbcast_open warns once for the job (at rank 0). With ETHBCAST_REQUIRE_KEY=1 and no key (or
 * a key file that cannot be read) ethbcast_open refuses, and the whole job uses the MPI's own
 * MPI_Bcast and MPI_Barrier with one warning: never keyless, never broken. */
#define _GNU_SOURCE
#include <mpi.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ethbcast.h"

#ifndef ETHBCAST_MPI_IMPL
#define ETHBCAST_MPI_IMPL "mpi"
#endif

static ethbcast_group_t *ebc_group = NULL;
static int ebc_keyval = MPI_KEYVAL_INVALID;
static int ebc_thread_multiple = 0;
static int ebc_world_size = 0;
static int ebc_world_rank = 0;
static unsigned long long ebc_calls_hw = 0, ebc_calls_pmpi = 0;
/* The same for MPI_Allgather(v) and MPI_Allreduce, reported apart. */
static unsigned long long ebc_coll_hw = 0, ebc_coll_pmpi = 0;
/* The group's counters just before it closes, for ETHBCAST_MPI_VERBOSE. */
static ethbcast_counters_t ebc_final;
/* The fastest link rate of the job (bits/s, 0: unknown), for ETHBCAST_MPI_VERBOSE. */
static unsigned long long ebc_link_rate = 0;
/* Longest broadcast that goes over ethbcast (ETHBCAST_MPI_MAX_BYTES), at most the group's
 * largest message. */
static size_t ebc_max_bytes = 4096;
/* Fastest link rate (bits/s) at which every size goes over ethbcast when
 * ETHBCAST_MPI_MAX_BYTES is unset: measured to win at every size at 100 Mbit/s and 1 Gbit/s. */
#define EBC_ALL_SIZES_UP_TO_RATE 1000000000ull
/* The group's largest message (the engine's max_message): longer broadcasts go to PMPI on every
 * rank, whatever ETHBCAST_MPI_MAX_BYTES says. */
#define EBC_MAX_MESSAGE ((size_t)1 << 30)
/* MPI_Allgather(v) and MPI_Allreduce go over ethbcast up to these many bytes in all, the sum of
 * every rank's part (ETHBCAST_MPI_ALLGATHER_MAX_BYTES) or contribution
 * (ETHBCAST_MPI_ALLREDUCE_MAX_BYTES), and each rank's up to ebc_max_bytes; larger calls go to
 * the MPI's own. A total, because it grows with the number of ranks as the cost does: every rank
 * receives every other rank's part. Over point-to-point links an allgather moves the same bytes
 * into each rank in log2(p) rounds (recursive doubling), so hardware broadcast saves the rounds
 * at every size; an allreduce moves one or two contributions per rank, so an allreduce as an
 * allgather wins only while the p - 1 contributions it receives cost less than the rounds it
 * saves (about 2 log2(p) round times of the link's bytes, nearly the same total at every p).
 * The defaults are measured (docs/mpi.md, "Allgather and allreduce"). */
#define EBC_ALLGATHER_TOTAL ((size_t)512 << 10)
/* And only in jobs of at most this many ranks: each rank receives p - 1 frames at least, and from
 * about a hundred ranks on their cost passes that of the log2(p) rounds they save (on the
 * simulator's wire alone, 128 members' 4-byte allgather took 1.75x recursive doubling's time). */
#define EBC_COLL_MAX_RANKS 64
#define EBC_ALLREDUCE_TOTAL ((size_t)32 << 10)
static size_t ebc_allgather_max = 0, ebc_allreduce_max = 0;


/* MPI's progress while a call waits on ethbcast. MPI requires an MPI call that blocks to let
 * other MPI communication progress: a peer's MPI_Send to this rank must complete while this
 * rank waits in MPI_Barrier (MPI 3.1, 3.5 "Progress"), and so must a peer's passive-target RMA
 * on this rank's window (11.7.3). Open MPI and MPICH progress only inside their own calls, and
 * a rank waiting on ethbcast makes none: a peer that needs this rank before it can reach the
 * collective would wait for it forever (MPICH's rma/linked_list did: capi/tests/mpich_suite.rs).
 * So while a call waits, a helper thread calls PMPI_Iprobe, which runs the MPI's progress
 * engine: a call still waiting after 10 ms gets a probe then, and one per millisecond until it
 * returns.
 *
 * The helper sleeps in poll() on a timerfd armed for 10 ms after a call started waiting. A call
 * arms it only when it is not armed already: it notes when it started waiting and makes its
 * count odd, which is an atomic add, a clock read in the vDSO and no system call. When the timer
 * fires the helper looks: a call waiting 10 ms gets a probe and the timer again in a
 * millisecond; a call waiting less gets the timer at its own 10 ms; no call waiting, and the
 * helper disarms and sleeps until a call arms it again. So calls that come and go cost at most
 * one wake-up and one timerfd_settime per 10 ms, not two timerfd_settime calls each (in an
 * 8-rank allgather loop those were half the system calls other than sched_yield). The helper needs MPI_THREAD_SERIALIZED (MPI_Init
 * asks for it): it calls MPI only while the rank's own calling thread is inside this library,
 * and a call returns only once a probe in flight has returned (the mutex). */
#define EBC_MP_GRACE_NS 10000000L
#define EBC_MP_PROBE_NS 1000000L
static pthread_t ebc_mp_thread;
static int ebc_mp_running = 0;
static pthread_mutex_t ebc_mp_mu = PTHREAD_MUTEX_INITIALIZER;
/* Odd while a call waits on ethbcast: incremented when it starts waiting and when it returns. */
static _Atomic unsigned long long ebc_mp_calls = 0;
/* When the waiting call started waiting (CLOCK_MONOTONIC, ns); whether the timer is armed. */
static _Atomic long long ebc_mp_since = 0;
static atomic_int ebc_mp_armed = 0;
static int ebc_mp_timer = -1, ebc_mp_stop_fd = -1;
static unsigned long long ebc_mp_probes = 0;

static long long ebc_mp_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Arms the helper's timer to fire once at `at` (CLOCK_MONOTONIC, ns). */
static void ebc_mp_arm(long long at) {
    struct itimerspec t = {.it_value = {.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL}};
    timerfd_settime(ebc_mp_timer, TFD_TIMER_ABSTIME, &t, NULL);
}

static void *ebc_mp_main(void *arg) {
    (void)arg;
    struct pollfd fds[2] = {{.fd = ebc_mp_timer, .events = POLLIN},
                            {.fd = ebc_mp_stop_fd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0)
            continue;
        if (fds[1].revents)
            return NULL;
        uint64_t expired = 0;
        if (read(ebc_mp_timer, &expired, sizeof expired) != (ssize_t)sizeof expired)
            continue;
        /* While the mutex is held a waiting call cannot return, so an odd count and its start
         * stay put. */
        pthread_mutex_lock(&ebc_mp_mu);
        if (atomic_load(&ebc_mp_calls) & 1) {
            long long since = atomic_load(&ebc_mp_since), now = ebc_mp_now();
            if (now - since >= EBC_MP_GRACE_NS) {
                /* A call waited 10 ms (or a millisecond more): let MPI progress. */
                int flag = 0;
                PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                            MPI_STATUS_IGNORE);
                ebc_mp_probes++;
                ebc_mp_arm(ebc_mp_now() + EBC_MP_PROBE_NS);
            } else {
                /* A later call than the one that armed the timer: its own 10 ms. */
                ebc_mp_arm(since + EBC_MP_GRACE_NS);
            }
        } else {
            /* No call waits: sleep until one arms the timer. A call that started waiting
             * before it could see the timer disarmed is seen here instead (both sides write,
             * then read the other's variable, in one order). */
            atomic_store(&ebc_mp_armed, 0);
            if ((atomic_load(&ebc_mp_calls) & 1) && !atomic_exchange(&ebc_mp_armed, 1))
                ebc_mp_arm(atomic_load(&ebc_mp_since) + EBC_MP_GRACE_NS);
        }
        pthread_mutex_unlock(&ebc_mp_mu);
    }
}

/* Starts the helper (only with MPI_THREAD_SERIALIZED or more). */
static void ebc_mp_start(int provided) {
    if (provided < MPI_THREAD_SERIALIZED)
        return;
    ebc_mp_timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    ebc_mp_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ebc_mp_timer >= 0 && ebc_mp_stop_fd >= 0)
        ebc_mp_running = pthread_create(&ebc_mp_thread, NULL, ebc_mp_main, NULL) == 0;
    if (!ebc_mp_running) {
        if (ebc_mp_timer >= 0)
            close(ebc_mp_timer);
        if (ebc_mp_stop_fd >= 0)
            close(ebc_mp_stop_fd);
        ebc_mp_timer = ebc_mp_stop_fd = -1;
    }
}

static void ebc_mp_stop_thread(void) {
    if (!ebc_mp_running)
        return;
    uint64_t one = 1;
    if (write(ebc_mp_stop_fd, &one, sizeof one) == (ssize_t)sizeof one)
        pthread_join(ebc_mp_thread, NULL);
    close(ebc_mp_timer);
    close(ebc_mp_stop_fd);
    ebc_mp_timer = ebc_mp_stop_fd = -1;
    ebc_mp_running = 0;
}

/* Around every ethbcast call that may wait for other ranks. */
static void ebc_wait_begin(void) {
    if (!ebc_mp_running)
        return;
    long long since = ebc_mp_now();
    atomic_store(&ebc_mp_since, since);
    atomic_fetch_add(&ebc_mp_calls, 1);
    if (!atomic_exchange(&ebc_mp_armed, 1))
        ebc_mp_arm(since + EBC_MP_GRACE_NS);
}

static void ebc_wait_end(void) {
    if (!ebc_mp_running)
        return;
    /* Waits for a probe in flight: the program's next MPI call comes after it. */
    pthread_mutex_lock(&ebc_mp_mu);
    atomic_fetch_add(&ebc_mp_calls, 1);
    pthread_mutex_unlock(&ebc_mp_mu);
}

static int ebc_bcast(int root, void *buf, size_t len) {
    ebc_wait_begin();
    int rc = ethbcast_bcast(ebc_group, root, buf, len);
    ebc_wait_end();
    return rc;
}

static int ebc_barrier(void) {
    ebc_wait_begin();
    int rc = ethbcast_barrier(ebc_group);
    ebc_wait_end();
    return rc;
}

/* The settings every rank must share, read from each rank's environment and then taken from
 * rank 0's: ranks that chose differently would wait for each other (one waits on ethbcast while
 * another calls PMPI, or two speak different algorithms). Unset is EBC_UNSET. */
enum {
    EBC_S_MAX_BYTES,
    EBC_S_ALGO,
    EBC_S_WAIT,
    EBC_S_TIMEOUT_MS,
    EBC_S_ROOT_WAITS_ABOVE,
    EBC_S_HOST_SPIN_US,
    EBC_S_PROGRESS_THREAD,
    EBC_S_GROUP_ID,
    EBC_S_ALLGATHER_MAX_BYTES,
    EBC_S_ALLREDUCE_MAX_BYTES,
    EBC_NSETTINGS
};
static const char *const ebc_setting_env[EBC_NSETTINGS] = {
    "ETHBCAST_MPI_MAX_BYTES", "ETHBCAST_ALGO",           "ETHBCAST_WAIT",
    "ETHBCAST_TIMEOUT_MS",    "ETHBCAST_ROOT_WAITS_ABOVE", "ETHBCAST_HOST_SPIN_US",
    "ETHBCAST_PROGRESS_THREAD", "ETHBCAST_GROUP_ID", "ETHBCAST_MPI_ALLGATHER_MAX_BYTES",
    "ETHBCAST_MPI_ALLREDUCE_MAX_BYTES"};
#define EBC_UNSET UINT64_MAX
/* A value no setting takes: ethbcast_open refuses it with a sentence naming the setting. */
#define EBC_INVALID (UINT64_MAX - 1)

static uint64_t ebc_number(const char *v) {
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 0);
    return end != NULL && end != v && *end == '\0' && v[0] != '-' ? (uint64_t)n : EBC_INVALID;
}

/* This rank's reading of one setting's environment variable. */
static uint64_t ebc_read_setting(int which) {
    const char *v = getenv(ebc_setting_env[which]);
    if (v == NULL || v[0] == '\0')
        return EBC_UNSET;
    switch (which) {
    case EBC_S_MAX_BYTES:
    case EBC_S_ALLGATHER_MAX_BYTES:
    case EBC_S_ALLREDUCE_MAX_BYTES:
        return strcasecmp(v, "unlimited") == 0 ? (uint64_t)EBC_MAX_MESSAGE : ebc_number(v);
    case EBC_S_ALGO:
        if (strcasecmp(v, "simple") == 0)
            return ETHBCAST_ALGO_SIMPLE;
        if (strcasecmp(v, "pushpull") == 0)
            return ETHBCAST_ALGO_PUSHPULL;
        if (strcasecmp(v, "tree") == 0)
            return ETHBCAST_ALGO_TREE;
        return EBC_INVALID;
    case EBC_S_WAIT:
        if (strcasecmp(v, "adaptive") == 0)
            return ETHBCAST_WAIT_ADAPTIVE;
        if (strcasecmp(v, "block") == 0)
            return ETHBCAST_WAIT_BLOCK;
        if (strcasecmp(v, "spin") == 0)
            return ETHBCAST_WAIT_SPIN;
        if (strcasecmp(v, "doze") == 0)
            return ETHBCAST_WAIT_DOZE;
        if (strcasecmp(v, "patient") == 0)
            return ETHBCAST_WAIT_PATIENT;
        return EBC_INVALID;
    case EBC_S_HOST_SPIN_US:
        return strcasecmp(v, "forever") == 0 ? ETHBCAST_HOST_SPIN_FOREVER : ebc_number(v);
    case EBC_S_PROGRESS_THREAD:
        return strcmp(v, "0") == 0 ? 0 : strcmp(v, "1") == 0 ? 1 : EBC_INVALID;
    default:
        return ebc_number(v);
    }
}

/* Every rank's settings become rank 0's. Rank 0 names, in one warning per setting, the ranks
 * whose environment said otherwise. */
static void ebc_agree_settings(uint64_t s[EBC_NSETTINGS]) {
    uint64_t mine[EBC_NSETTINGS];
    for (int i = 0; i < EBC_NSETTINGS; i++)
        mine[i] = s[i] = ebc_read_setting(i);
    PMPI_Bcast(s, EBC_NSETTINGS, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    unsigned differs = 0;
    for (int i = 0; i < EBC_NSETTINGS; i++)
        if (mine[i] != s[i])
            differs |= 1u << i;
    unsigned *all = ebc_world_rank == 0 ? calloc((size_t)ebc_world_size, sizeof *all) : NULL;
    PMPI_Gather(&differs, 1, MPI_UNSIGNED, all, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
    if (all == NULL)
        return;
    for (int i = 0; i < EBC_NSETTINGS; i++) {
        char ranks[200] = "";
        size_t used = 0;
        int n = 0;
        for (int r = 1; r < ebc_world_size; r++) {
            if (!(all[r] & (1u << i)))
                continue;
            if (used < sizeof ranks - 16)
                used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d",
                                         n > 0 ? ", " : "", r);
            else if (used < sizeof ranks - 4)
                used += (size_t)snprintf(ranks + used, sizeof ranks - used, ", ...");
            n++;
        }
        if (n > 0) {
            const char *v = getenv(ebc_setting_env[i]);
            fprintf(stderr,
                    "ethbcast-mpi: warning: %s differs from rank 0's (%s) on %d rank%s (%s): "
                    "every rank uses rank 0's; set it the same for the whole job\n",
                    ebc_setting_env[i], v != NULL && v[0] != '\0' ? v : "unset", n,
                    n == 1 ? "" : "s", ranks);
        }
    }
    free(all);
}

/* Attribute values cached on a communicator: whether it is congruent to MPI_COMM_WORLD. */
#define EBC_NOT_CONGRUENT ((void *)(intptr_t)1)
#define EBC_CONGRUENT ((void *)(intptr_t)2)

/* Joins the group, or leaves ebc_group NULL on every rank: all ranks decide together, so that
 * no rank uses ethbcast while another uses PMPI. The lowest rank that failed prints why. */
static void ebc_setup(void) {
    PMPI_Comm_rank(MPI_COMM_WORLD, &ebc_world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &ebc_world_size);
    uint64_t set[EBC_NSETTINGS];
    ebc_agree_settings(set);
    if (set[EBC_S_MAX_BYTES] == EBC_INVALID) {
        if (ebc_world_rank == 0)
            fprintf(stderr, "ethbcast-mpi: ETHBCAST_MPI_MAX_BYTES=%s is not a number of bytes "
                            "or \"unlimited\"; keeping %zu\n",
                    getenv("ETHBCAST_MPI_MAX_BYTES"), ebc_max_bytes);
    } else if (set[EBC_S_MAX_BYTES] != EBC_UNSET) {
        ebc_max_bytes = (size_t)set[EBC_S_MAX_BYTES];
    }
    ebc_allgather_max = EBC_ALLGATHER_TOTAL;
    ebc_allreduce_max = EBC_ALLREDUCE_TOTAL;
    for (int i = EBC_S_ALLGATHER_MAX_BYTES; i <= EBC_S_ALLREDUCE_MAX_BYTES; i++) {
        size_t *limit = i == EBC_S_ALLGATHER_MAX_BYTES ? &ebc_allgather_max : &ebc_allreduce_max;
        if (set[i] == EBC_INVALID) {
            if (ebc_world_rank == 0)
                fprintf(stderr, "ethbcast-mpi: %s=%s is not a number of bytes or "
                                "\"unlimited\"; keeping %zu\n",
                        ebc_setting_env[i], getenv(ebc_setting_env[i]), *limit);
        } else if (set[i] != EBC_UNSET) {
            *limit = set[i] > EBC_MAX_MESSAGE ? EBC_MAX_MESSAGE : (size_t)set[i];
        }
    }
    char reason[512] = "";
    const char *iface = getenv("ETHBCAST_IFACE");
    /* Unset, the limit follows the fastest link of the job; a link of unknown rate counts as
     * the fastest. Every rank takes part in the reduction, so all agree. */
    unsigned long long rate = 0, fastest = 0;
    if (iface != NULL && iface[0] != '\0')
        rate = (unsigned long long)ethbcast_link_rate(iface);
    unsigned long long mine = rate == 0 ? ~0ull : rate;
    PMPI_Allreduce(&mine, &fastest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (set[EBC_S_MAX_BYTES] == EBC_UNSET && fastest <= EBC_ALL_SIZES_UP_TO_RATE)
        ebc_max_bytes = EBC_MAX_MESSAGE;
    if (ebc_max_bytes > EBC_MAX_MESSAGE)
        ebc_max_bytes = EBC_MAX_MESSAGE;
    ebc_link_rate = fastest == ~0ull ? 0 : fastest;
    /* An allreduce by allgather moves p - 1 contributions into each port to save about
     * 2 log2(p) round times, so the total it wins below scales with the links' rate
     * (docs/mpi.md): the default holds at 1 Gbit/s and faster, and a slower job's is that
     * much smaller (3276 bytes at 100 Mbit/s, where 8 ranks' 4 KiB contributions took 1.6
     * times Open MPI's own allreduce). An allgather moves the same bytes into each port as
     * the MPI's own, but all p roots send at once: on a slow port the p - 1 parts arrive
     * together and overflow the port's queue, where the MPI's ring takes them one peer at a
     * time. So its total scales the same way (52428 bytes at 100 Mbit/s, where 8 ranks' 16 KiB
     * parts were at parity and 64 KiB parts took 1.3 times Open MPI's own). Both unless set. */
    for (int i = EBC_S_ALLGATHER_MAX_BYTES; i <= EBC_S_ALLREDUCE_MAX_BYTES; i++) {
        size_t *limit = i == EBC_S_ALLGATHER_MAX_BYTES ? &ebc_allgather_max : &ebc_allreduce_max;
        if (set[i] == EBC_UNSET && ebc_link_rate > 0 && ebc_link_rate < EBC_ALL_SIZES_UP_TO_RATE)
            *limit = (size_t)((unsigned long long)*limit * ebc_link_rate /
                              EBC_ALL_SIZES_UP_TO_RATE);
    }
    int ok = 1;
    if (iface == NULL || iface[0] == '\0') {
        ok = 0;
        snprintf(reason, sizeof reason, "ETHBCAST_IFACE is not set");
    } else {
        int rc = ethbcast_probe(iface);
        if (rc != ETHBCAST_OK) {
            ok = 0;
            snprintf(reason, sizeof reason, "%s", ethbcast_last_error());
        }
    }
    /* Ranks behind one MAC share a host: the lowest of them is the host's member of the
     * network group, the others go through shared memory. */
    char mac[32] = "";
    if (ok) {
        char path[300];
        snprintf(path, sizeof path, "/sys/class/net/%s/address", iface);
        FILE *f = fopen(path, "r");
        if (f == NULL || fgets(mac, sizeof mac, f) == NULL)
            snprintf(mac, sizeof mac, "rank-%d", ebc_world_rank);
        if (f != NULL)
            fclose(f);
    }
    char *macs = calloc((size_t)ebc_world_size, sizeof mac);
    int *host_of = calloc((size_t)ebc_world_size, sizeof(int));
    PMPI_Allgather(mac, sizeof mac, MPI_CHAR, macs, sizeof mac, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < ebc_world_size; r++) {
        host_of[r] = r;
        for (int q = 0; q < r; q++)
            if (macs[r * sizeof mac] != '\0' &&
                strncmp(macs + r * sizeof mac, macs + q * sizeof mac, sizeof mac) == 0) {
                host_of[r] = host_of[q];
                break;
            }
    }
    free(macs);
    /* Step 1: can every rank open the interface? (Cheap; no waiting for the others.) */
    int in[2] = {ok, ebc_world_rank}, all[2];
    PMPI_Allreduce(in, all, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    if (all[0]) {
        ethbcast_options_t opts;
        ethbcast_options_default(&opts);
        /* A setting no rank of the job can take is refused by ethbcast_open, which says why. */
        uint64_t v;
        /* A rank in a collective call has nothing else to do while it waits: it spins
         * (yielding) as MPI's own collectives do, and blocks only after 2 ms. */
        opts.wait = ETHBCAST_WAIT_PATIENT;
        if ((v = set[EBC_S_WAIT]) != EBC_UNSET)
            opts.wait = v == EBC_INVALID ? UINT32_MAX : (uint32_t)v;
        /* The algorithm is the library's default (simple broadcast) unless set. */
        if ((v = set[EBC_S_ALGO]) != EBC_UNSET)
            opts.algorithm = v == EBC_INVALID ? UINT32_MAX : (uint32_t)v;
        if ((v = set[EBC_S_ROOT_WAITS_ABOVE]) != EBC_UNSET && v != EBC_INVALID)
            opts.root_waits_above = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        if ((v = set[EBC_S_HOST_SPIN_US]) != EBC_UNSET && v != EBC_INVALID)
            opts.host_spin_us = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        if (set[EBC_S_PROGRESS_THREAD] == 0)
            opts.progress_thread = 0;
        if ((v = set[EBC_S_TIMEOUT_MS]) != EBC_UNSET && v != EBC_INVALID && v > 0)
            opts.timeout_ms = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        /* A group id per job, so that two jobs on one segment ignore each other. */
        unsigned int id = 0;
        if ((v = set[EBC_S_GROUP_ID]) != EBC_UNSET && v != EBC_INVALID)
            id = (unsigned int)v;
        else if (ebc_world_rank == 0)
            id = (unsigned int)getpid() * 2654435761u ^ (unsigned int)time(NULL);
        PMPI_Bcast(&id, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
        opts.group_id = id;
        /* Ranks are MPI_COMM_WORLD's, hosts are the ranks' MACs. */
        int rc = ethbcast_open_hosts(iface, &opts, ebc_world_rank, ebc_world_size, host_of,
                                     &ebc_group);
        ok = rc == ETHBCAST_OK;
        if (!ok)
            snprintf(reason, sizeof reason, "%s", ethbcast_last_error());
        else if (ethbcast_rank(ebc_group) != ebc_world_rank ||
                 ethbcast_size(ebc_group) != ebc_world_size) {
            ok = 0;
            snprintf(reason, sizeof reason, "group rank %d of %d differs from MPI rank %d of %d",
                     ethbcast_rank(ebc_group), ethbcast_size(ebc_group), ebc_world_rank,
                     ebc_world_size);
        }
        /* Step 2: did every rank join? */
        in[0] = ok;
        PMPI_Allreduce(in, all, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
        if (!all[0] && ebc_group != NULL) {
            ethbcast_close(ebc_group);
            ebc_group = NULL;
        }
    }
    free(host_of);
    if (!all[0] && ebc_world_rank == all[1])
        fprintf(stderr,
                "ethbcast-mpi: rank %d: hardware broadcast is off for this job, MPI_Bcast and "
                "MPI_Barrier use " ETHBCAST_MPI_IMPL "'s own: %s\n",
                ebc_world_rank, reason);
    if (ebc_group != NULL)
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ebc_keyval,
                                NULL);
}

/* MPI_Init is MPI_Init_thread with MPI_THREAD_SINGLE, which may provide more: the helper
 * that lets MPI progress while a call waits on ethbcast needs MPI_THREAD_SERIALIZED. */
int MPI_Init(int *argc, char ***argv) {
    int provided = MPI_THREAD_SINGLE;
    int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc == MPI_SUCCESS) {
        ebc_thread_multiple = provided == MPI_THREAD_MULTIPLE;
        ebc_setup();
        if (ebc_group != NULL)
            ebc_mp_start(provided);
    }
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int asked = required < MPI_THREAD_SERIALIZED ? MPI_THREAD_SERIALIZED : required;
    int rc = PMPI_Init_thread(argc, argv, asked, provided);
    if (rc == MPI_SUCCESS) {
        ebc_thread_multiple = *provided == MPI_THREAD_MULTIPLE;
        ebc_setup();
        if (ebc_group != NULL)
            ebc_mp_start(*provided);
    }
    return rc;
}

/* Whether collectives on `comm` go over ethbcast (the same answer on every rank of comm). */
static int ebc_uses_group(MPI_Comm comm) {
    if (ebc_group == NULL || comm == MPI_COMM_NULL)
        return 0;
    if (comm == MPI_COMM_WORLD)
        return 1;
    if (ebc_thread_multiple)
        return 0;
    void *cached = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, ebc_keyval, &cached, &found) != MPI_SUCCESS)
        return 0;
    if (found)
        return cached == EBC_CONGRUENT;
    int inter = 0, result = MPI_UNEQUAL;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return 0;
    if (PMPI_Comm_compare(MPI_COMM_WORLD, comm, &result) != MPI_SUCCESS)
        return 0;
    int yes = result == MPI_IDENT || result == MPI_CONGRUENT;
    PMPI_Comm_set_attr(comm, ebc_keyval, yes ? EBC_CONGRUENT : EBC_NOT_CONGRUENT);
    return yes;
}

/* An ethbcast failure as an MPI error, through the communicator's error handler. */
static int ebc_fail(MPI_Comm comm, const char *what, int rc) {
    int code = rc == ETHBCAST_ERR_LENGTH ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
    fprintf(stderr, "ethbcast-mpi: rank %d: %s: %s (%s)\n", ebc_world_rank, what,
            ethbcast_strerror(rc), ethbcast_last_error());
    PMPI_Comm_call_errhandler(comm, code);
    return code;
}

/* Whether `count` elements of the predefined `type` are one block of bytes at the buffer's
 * start, the message itself: the type has no holes (its size is its extent and its true extent,
 * from lower bound 0), so element i lies right after element i-1. MPI_DOUBLE_INT and the other
 * pair types of MPI_MAXLOC have holes (size 12, extent 16) and are not. Derived types may
 * overlap or reorder their blocks, so they are never taken as one block. */
static int ebc_one_block(MPI_Datatype type, int count, int size, int combiner) {
    if (combiner != MPI_COMBINER_NAMED)
        return 0;
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    if (PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
        return 0;
    return lb == 0 && true_lb == 0 && true_extent == (MPI_Aint)size &&
           (count <= 1 || extent == (MPI_Aint)size);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    int size = 0, ni, na, nd, combiner;
    if (!ebc_uses_group(comm) || count < 0 || root < 0 || root >= ebc_world_size ||
        datatype == MPI_DATATYPE_NULL || PMPI_Type_size(datatype, &size) != MPI_SUCCESS ||
        PMPI_Type_get_envelope(datatype, &ni, &na, &nd, &combiner) != MPI_SUCCESS) {
        ebc_calls_pmpi++;
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    /* The route depends on the number of bytes only, the same on every rank whose count and
     * type signature agree with the root's, whatever datatype describes them (ebc_max_bytes
     * is at most the group's largest message, so no rank can be refused what another sends). */
    size_t bytes = (size_t)count * (size_t)size;
    if (bytes > ebc_max_bytes) {
        ebc_calls_pmpi++;
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    ebc_calls_hw++;
    /* Zero bytes are broadcast too: a rank that passes count 0 while the root sends a message
     * must take that message now (and fail with MPI_ERR_TRUNCATE), not at its next broadcast. */
    if (ebc_one_block(datatype, count, size, combiner)) {
        int rc = ebc_bcast(root, bytes > 0 ? buffer : NULL, bytes);
        return rc == ETHBCAST_OK ? MPI_SUCCESS : ebc_fail(comm, "MPI_Bcast", rc);
    }
    /* Anything else travels packed: the type signature's elements in order, without holes
     * (PMPI_Pack at the root, PMPI_Unpack at the others, which leaves their holes untouched).
     * bytes <= EBC_MAX_MESSAGE fits MPI_Pack's int sizes. */
    int packed_max = 0;
    PMPI_Pack_size(count, datatype, comm, &packed_max);
    if ((size_t)packed_max < bytes)
        packed_max = (int)bytes;
    char *packed = malloc(packed_max > 0 ? (size_t)packed_max : 1);
    if (packed == NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    int me = 0, position = 0, rc = MPI_SUCCESS;
    PMPI_Comm_rank(comm, &me);
    if (me == root) {
        rc = PMPI_Pack(buffer, count, datatype, packed, packed_max, &position, comm);
        if (rc == MPI_SUCCESS && (size_t)position != bytes) {
            fprintf(stderr, "ethbcast-mpi: MPI_Pack made %d bytes of a %zu-byte signature\n",
                    position, bytes);
            rc = MPI_ERR_INTERN;
        }
    }
    if (rc == MPI_SUCCESS) {
        int e = ebc_bcast(root, packed, bytes);
        if (e != ETHBCAST_OK)
            rc = ebc_fail(comm, "MPI_Bcast", e);
        else if (me != root && bytes > 0)
            rc = PMPI_Unpack(packed, (int)bytes, &position, buffer, count, datatype, comm);
    }
    free(packed);
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    if (!ebc_uses_group(comm)) {
        ebc_calls_pmpi++;
        return PMPI_Barrier(comm);
    }
    ebc_calls_hw++;
    int rc = ebc_barrier();
    return rc == ETHBCAST_OK ? MPI_SUCCESS : ebc_fail(comm, "MPI_Barrier", rc);
}

/* Allgather over the group: every rank's part, `lens[r]` bytes, back to back in `out`; `part`
 * NULL when this rank's part is already at its place in `out`. */
static int ebc_allgather(const void *part, size_t part_len, void *out, const size_t *lens) {
    ebc_wait_begin();
    int rc = ethbcast_allgather(ebc_group, part, part_len, out, lens);
    ebc_wait_end();
    return rc;
}

static int ebc_gather(int root, const void *part, size_t part_len, void *out) {
    ebc_wait_begin();
    int rc = ethbcast_gather(ebc_group, root, part, part_len, out);
    ebc_wait_end();
    return rc;
}

/* A buffer kept from call to call (the gathered parts of MPI_Allreduce, packed parts), grown
 * as needed. */
struct ebc_scratch {
    unsigned char *p;
    size_t cap;
};
static struct ebc_scratch ebc_gathered, ebc_packed;

static unsigned char *ebc_room(struct ebc_scratch *s, size_t len) {
    if (len > s->cap) {
        unsigned char *p = realloc(s->p, len);
        if (p == NULL)
            return NULL;
        s->p = p;
        s->cap = len;
    }
    return s->p != NULL ? s->p : (unsigned char *)(s->p = malloc(1));
}

/* Whether `type` is one usable by this interposer: size and envelope known. */
static int ebc_type_ok(MPI_Datatype type, int *size, int *combiner) {
    int ni, na, nd;
    return type != MPI_DATATYPE_NULL && PMPI_Type_size(type, size) == MPI_SUCCESS &&
           PMPI_Type_get_envelope(type, &ni, &na, &nd, combiner) == MPI_SUCCESS;
}

/* MPI_Allgatherv's work once the route is chosen: recvcounts/displs in elements of recvtype
 * (the same on every rank), the gathered parts written through recvtype's type map. Parts
 * travel as the type signature's bytes, straight from and into the buffers where the types
 * are predefined, without holes, and the parts lie back to back; packed otherwise. */
static int ebc_gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, const int *recvcounts, const int *displs,
                       MPI_Datatype recvtype, int rsize, int rcombiner, MPI_Comm comm,
                       const char *what) {
    int n = ebc_world_size, me = ebc_world_rank;
    size_t *lens = malloc((size_t)n * sizeof *lens);
    if (lens == NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    MPI_Aint lb = 0, extent = 0;
    PMPI_Type_get_extent(recvtype, &lb, &extent);
    size_t total = 0;
    int direct = ebc_one_block(recvtype, 2, rsize, rcombiner);
    for (int r = 0; r < n; r++) {
        lens[r] = (size_t)recvcounts[r] * (size_t)rsize;
        /* Back to back in recvbuf: part r starts where the parts before it end. */
        if ((size_t)displs[r] * (size_t)rsize != total || displs[r] < 0)
            direct = 0;
        total += lens[r];
    }
    int rc = MPI_SUCCESS;
    unsigned char *out = direct ? (unsigned char *)recvbuf : ebc_room(&ebc_gathered, total);
    const void *part = NULL;
    size_t part_len = lens[me];
    int position = 0;
    if (out == NULL && total > 0) {
        /* (A NULL receive buffer is fine for parts of zero bytes.) */
        rc = MPI_ERR_NO_MEM;
    } else if (sendbuf == MPI_IN_PLACE) {
        /* This rank's part is in recvbuf: in place when the parts go straight there, else
         * packed to its place among the gathered bytes. */
        if (!direct) {
            size_t at = 0;
            for (int r = 0; r < me; r++)
                at += lens[r];
            rc = PMPI_Pack((char *)recvbuf + (MPI_Aint)displs[me] * extent, recvcounts[me],
                           recvtype, out + at, (int)lens[me], &position, comm);
        }
    } else {
        int ssize = 0, scombiner = 0;
        if (!ebc_type_ok(sendtype, &ssize, &scombiner) || sendcount < 0) {
            rc = MPI_ERR_TYPE;
        } else {
            part_len = (size_t)sendcount * (size_t)ssize;
            if (ebc_one_block(sendtype, sendcount, ssize, scombiner)) {
                part = sendbuf;
            } else {
                int packed_max = 0;
                PMPI_Pack_size(sendcount, sendtype, comm, &packed_max);
                unsigned char *p = ebc_room(&ebc_packed, (size_t)packed_max > part_len
                                                             ? (size_t)packed_max
                                                             : part_len);
                if (p == NULL)
                    rc = MPI_ERR_NO_MEM;
                else
                    rc = PMPI_Pack(sendbuf, sendcount, sendtype, p, packed_max, &position,
                                   comm);
                part = p;
            }
        }
        /* A zero-length part needs no bytes; the library takes NULL only as "in place". */
        if (part == NULL && rc == MPI_SUCCESS)
            part = out;
    }
    if (rc == MPI_SUCCESS) {
        int e = ebc_allgather(part, part_len, out, lens);
        if (e != ETHBCAST_OK) {
            free(lens);
            return ebc_fail(comm, what, e);
        }
        if (!direct) {
            size_t at = 0;
            for (int r = 0; r < n && rc == MPI_SUCCESS; r++) {
                position = 0;
                if (lens[r] > 0 && !(r == me && sendbuf == MPI_IN_PLACE))
                    rc = PMPI_Unpack(out + at, (int)lens[r], &position,
                                     (char *)recvbuf + (MPI_Aint)displs[r] * extent,
                                     recvcounts[r], recvtype, comm);
                at += lens[r];
            }
        }
    }
    free(lens);
    if (rc != MPI_SUCCESS)
        PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

/* The route of an allgather of `total` bytes whose largest part is `largest`: the same on
 * every rank, since every rank passes the same receive counts and type signature. */
static int ebc_gather_here(size_t total, size_t largest) {
    return ebc_world_size <= EBC_COLL_MAX_RANKS && total <= ebc_allgather_max &&
           largest <= ebc_max_bytes;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    int rsize = 0, rcombiner = 0;
    if (!ebc_uses_group(comm) || recvcount < 0 || !ebc_type_ok(recvtype, &rsize, &rcombiner) ||
        (sendbuf != MPI_IN_PLACE && (sendcount < 0 || sendtype == MPI_DATATYPE_NULL))) {
        ebc_coll_pmpi++;
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    size_t part = (size_t)recvcount * (size_t)rsize;
    if (!ebc_gather_here(part * (size_t)ebc_world_size, part)) {
        ebc_coll_pmpi++;
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    ebc_coll_hw++;
    int n = ebc_world_size;
    int *counts = malloc(2 * (size_t)n * sizeof *counts);
    if (counts == NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    for (int r = 0; r < n; r++) {
        counts[r] = recvcount;
        counts[n + r] = r * recvcount;
    }
    int rc = ebc_gatherv(sendbuf, sendcount, sendtype, recvbuf, counts, counts + n, recvtype,
                         rsize, rcombiner, comm, "MPI_Allgather");
    free(counts);
    return rc;
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
    int rsize = 0, rcombiner = 0;
    int usable = ebc_uses_group(comm) && recvcounts != NULL && displs != NULL &&
                 ebc_type_ok(recvtype, &rsize, &rcombiner) &&
                 (sendbuf == MPI_IN_PLACE || (sendcount >= 0 && sendtype != MPI_DATATYPE_NULL));
    size_t total = 0, largest = 0;
    for (int r = 0; usable && r < ebc_world_size; r++) {
        if (recvcounts[r] < 0) {
            usable = 0;
            break;
        }
        size_t len = (size_t)recvcounts[r] * (size_t)rsize;
        total += len;
        largest = len > largest ? len : largest;
    }
    if (!usable || !ebc_gather_here(total, largest)) {
        ebc_coll_pmpi++;
        return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                               recvtype, comm);
    }
    ebc_coll_hw++;
    return ebc_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                       rsize, rcombiner, comm, "MPI_Allgatherv");
}

/* Whether `op` applies to `type`, as the MPI itself answers it: a predefined op is tried on one
 * zeroed element with PMPI_Reduce_local, errors returned rather than raised; the answers for
 * predefined types are kept. A user-defined op is never tried (its function may have effects):
 * MPI applies it to any type. An invalid pair goes to the MPI's own MPI_Allreduce, which reports
 * the error through the communicator's handler as it would without the interposer. */
static int ebc_op_applies(MPI_Op op, MPI_Datatype type, int combiner) {
    static const MPI_Op predefined[] = {MPI_MAX,  MPI_MIN,  MPI_SUM,    MPI_PROD,
                                        MPI_LAND, MPI_BAND, MPI_LOR,    MPI_BOR,
                                        MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC,
                                        MPI_REPLACE, MPI_NO_OP};
    int known = 0;
    for (size_t i = 0; i < sizeof predefined / sizeof predefined[0]; i++)
        known |= op == predefined[i];
    if (!known)
        return 1;
    enum { CACHE = 128 };
    static struct {
        MPI_Op op;
        MPI_Datatype type;
        int applies;
    } cache[CACHE];
    static int cached = 0;
    int named = combiner == MPI_COMBINER_NAMED;
    for (int i = 0; named && i < cached; i++)
        if (cache[i].op == op && cache[i].type == type)
            return cache[i].applies;
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    PMPI_Type_get_extent(type, &lb, &extent);
    PMPI_Type_get_true_extent(type, &tlb, &textent);
    unsigned char *a = calloc(1, (size_t)textent + 1), *b = calloc(1, (size_t)textent + 1);
    int applies = 0;
    if (a != NULL && b != NULL) {
        MPI_Errhandler world, self;
        PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
        PMPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
        PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        PMPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        applies = PMPI_Reduce_local(a - tlb, b - tlb, 1, type, op) == MPI_SUCCESS;
        PMPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
        PMPI_Comm_set_errhandler(MPI_COMM_SELF, self);
        PMPI_Errhandler_free(&world);
        PMPI_Errhandler_free(&self);
    }
    free(a);
    free(b);
    if (named && cached < CACHE) {
        cache[cached].op = op;
        cache[cached].type = type;
        cache[cached].applies = applies;
        cached++;
    }
    return applies;
}

/* recvbuf = x0 op (x1 op (... op x(n-1))), the contributions of `bytes` each back to back in
 * `all` (packed unless `flat`), with PMPI_Reduce_local (in op inout -> inout): the order MPI
 * fixes for non-commutative ops (MPI 3.1, 5.9.1), and one of those it allows for the others.
 * Returns an MPI error code. */
static int ebc_reduce_in_order(const unsigned char *all, size_t bytes, int n, int flat,
                               void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                               MPI_Comm comm) {
    if (bytes == 0)
        return MPI_SUCCESS;
    int rc = MPI_SUCCESS, position = 0;
    const unsigned char *last = all + bytes * (size_t)(n - 1);
    if (flat) {
        memmove(recvbuf, last, bytes);
        for (int r = n - 2; r >= 0 && rc == MPI_SUCCESS; r--)
            rc = PMPI_Reduce_local(all + bytes * (size_t)r, recvbuf, count, datatype, op);
        return rc;
    }
    /* Each contribution unpacked into a buffer of the datatype's layout. */
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    PMPI_Type_get_extent(datatype, &lb, &extent);
    PMPI_Type_get_true_extent(datatype, &tlb, &textent);
    size_t span = (size_t)textent + (size_t)(count - 1) * (size_t)extent;
    unsigned char *tmp = malloc(span > 0 ? span : 1);
    if (tmp == NULL)
        return MPI_ERR_NO_MEM;
    rc = PMPI_Unpack(last, (int)bytes, &position, recvbuf, count, datatype, comm);
    for (int r = n - 2; r >= 0 && rc == MPI_SUCCESS; r--) {
        position = 0;
        rc = PMPI_Unpack(all + bytes * (size_t)r, (int)bytes, &position, tmp - tlb, count,
                         datatype, comm);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Reduce_local(tmp - tlb, recvbuf, count, datatype, op);
    }
    free(tmp);
    return rc;
}

/* Whether a reduction of `count` elements of `datatype` with `op` goes over ethbcast: the
 * same answer on every rank, which passes the same count, type signature and op. */
static int ebc_reduce_here(MPI_Comm comm, int count, MPI_Datatype datatype, MPI_Op op,
                           int *size, int *combiner) {
    if (!ebc_uses_group(comm) || count < 0 || op == MPI_OP_NULL ||
        !ebc_type_ok(datatype, size, combiner))
        return 0;
    size_t bytes = (size_t)count * (size_t)*size;
    int n = ebc_world_size;
    return n <= EBC_COLL_MAX_RANKS && bytes * (size_t)n <= ebc_allreduce_max &&
           bytes <= ebc_max_bytes && ebc_op_applies(op, datatype, *combiner);
}

/* MPI_Allreduce as an allgather of every rank's contribution, then the reduction in rank order
 * on every rank (ebc_reduce_in_order): every rank computes the same operations on the same
 * bytes in the same order, so every rank has bitwise the same result, floating point
 * included. */
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm) {
    int size = 0, combiner = 0;
    if (!ebc_reduce_here(comm, count, datatype, op, &size, &combiner)) {
        ebc_coll_pmpi++;
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    }
    ebc_coll_hw++;
    size_t bytes = (size_t)count * (size_t)size;
    int n = ebc_world_size;
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    int flat = ebc_one_block(datatype, count, size, combiner);
    unsigned char *all = ebc_room(&ebc_gathered, bytes * (size_t)n);
    if (all == NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    int rc = MPI_SUCCESS, position = 0;
    const void *part = bytes > 0 ? mine : all;
    if (!flat) {
        /* Packed to its place among the gathered bytes, and gathered in place. */
        rc = PMPI_Pack(mine, count, datatype, all + bytes * (size_t)ebc_world_rank,
                       (int)bytes, &position, comm);
        part = NULL;
    }
    if (rc == MPI_SUCCESS) {
        int e = ebc_allgather(part, bytes, all, NULL);
        if (e != ETHBCAST_OK)
            return ebc_fail(comm, "MPI_Allreduce", e);
        rc = ebc_reduce_in_order(all, bytes, n, flat, recvbuf, count, datatype, op, comm);
    }
    if (rc != MPI_SUCCESS)
        PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

/* MPI_Reduce as a gather of every rank's contribution to the root (ethbcast_gather: every rank
 * broadcasts its contribution once, all at the same time, and a rank other than the root
 * returns once its own is sent), then the reduction in rank order at the root
 * (ebc_reduce_in_order), as MPI_Allreduce. MPI_IN_PLACE is the root's alone (MPI 3.1, 5.9.1):
 * a rank other than the root that passes it still takes part, with an empty contribution
 * that fails the root's call (MPI_ERR_TRUNCATE), and gets MPI_ERR_BUFFER itself. */
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm) {
    int size = 0, combiner = 0, n = ebc_world_size;
    if (root < 0 || root >= n || !ebc_reduce_here(comm, count, datatype, op, &size, &combiner)) {
        ebc_coll_pmpi++;
        return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    }
    ebc_coll_hw++;
    size_t bytes = (size_t)count * (size_t)size;
    int me = ebc_world_rank, at_root = me == root;
    int flat = ebc_one_block(datatype, count, size, combiner);
    /* The root's gathered contributions; a packed contribution apart from them (the library
     * takes a part that does not overlap what it gathers into). */
    unsigned char *all = at_root ? ebc_room(&ebc_gathered, bytes * (size_t)n) : NULL;
    unsigned char *packed = flat ? NULL : ebc_room(&ebc_packed, bytes);
    if ((at_root && all == NULL) || (!flat && packed == NULL)) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    int misplaced = sendbuf == MPI_IN_PLACE && !at_root;
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    const void *part = misplaced || bytes == 0 ? NULL : mine;
    int rc = MPI_SUCCESS, position = 0;
    if (part != NULL && !flat) {
        rc = PMPI_Pack(mine, count, datatype, packed, (int)bytes, &position, comm);
        part = packed;
    }
    if (rc == MPI_SUCCESS) {
        int e = ebc_gather(root, part, part == NULL ? 0 : bytes, at_root ? all : NULL);
        if (e != ETHBCAST_OK)
            return ebc_fail(comm, "MPI_Reduce", e);
        if (misplaced)
            rc = MPI_ERR_BUFFER;
        else if (at_root)
            rc = ebc_reduce_in_order(all, bytes, n, flat, recvbuf, count, datatype, op, comm);
    }
    if (rc != MPI_SUCCESS)
        PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int MPI_Finalize(void) {
    if (ebc_group != NULL) {
        /* Everyone's broadcasts acknowledged, everyone past the last ethbcast call, then a
         * barrier that MPI carries reliably (the progress thread serves stragglers of the
         * ethbcast barrier meanwhile): after it no member needs another, so close. */
        ebc_wait_begin();
        int rc = ethbcast_flush(ebc_group);
        ebc_wait_end();
        if (rc == ETHBCAST_OK)
            rc = ebc_barrier();
        ebc_mp_stop_thread();
        if (rc != ETHBCAST_OK)
            fprintf(stderr, "ethbcast-mpi: rank %d: leaving the group: %s (%s)\n",
                    ebc_world_rank, ethbcast_strerror(rc), ethbcast_last_error());
        PMPI_Barrier(MPI_COMM_WORLD);
        ethbcast_counters(ebc_group, &ebc_final);
        ethbcast_close(ebc_group);
        ebc_group = NULL;
        PMPI_Comm_free_keyval(&ebc_keyval);
    }
    const char *verbose = getenv("ETHBCAST_MPI_VERBOSE");
    if (verbose != NULL && strcmp(verbose, "1") == 0)
        fprintf(stderr,
                "ethbcast-mpi: rank %d: %llu calls over ethbcast, %llu over PMPI, "
                "%llu looks of the progress thread; size limit %zu bytes, link %llu bit/s; "
                "%llu MPI progress probes while waiting; %llu allgathers and reductions over "
                "ethbcast, %llu over PMPI; allreduce limit %zu bytes, allgather limit %zu "
                "bytes\n",
                ebc_world_rank, ebc_calls_hw, ebc_calls_pmpi,
                (unsigned long long)ebc_final.background_polls, ebc_max_bytes, ebc_link_rate,
                ebc_mp_probes, ebc_coll_hw, ebc_coll_pmpi, ebc_allreduce_max,
                ebc_allgather_max);
    return PMPI_Finalize();
}
