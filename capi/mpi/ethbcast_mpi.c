/* libethbcast_mpi: MPI_Bcast and MPI_Barrier over Ethernet hardware broadcast, for MPI
 * programs as they are (LD_PRELOAD), through the MPI profiling interface (PMPI).
 *
 * Compiled once per MPI implementation with its own mpicc (Open MPI's MPI_Comm is a pointer,
 * MPICH's an int): `bash capi/mpi/build.sh` makes target/mpi/libethbcast_mpi-openmpi.so and
 * target/mpi/libethbcast_mpi-mpich.so. Run with
 *   ETHBCAST_IFACE=eth0 LD_PRELOAD=.../libethbcast_mpi-openmpi.so ./program
 * (mpirun -x / mpiexec -genv pass both to every rank).
 *
 * What goes over ethbcast: MPI_Bcast and MPI_Barrier on MPI_COMM_WORLD and on communicators
 * congruent to it (same members, same order: MPI_Comm_compare gives MPI_IDENT or
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
 * Every broadcast on the group carries its length, zero included: a rank whose count
 * disagrees with the root's gets MPI_ERR_TRUNCATE for that call (through the communicator's
 * error handler), and the call has taken the root's message, so later broadcasts are not
 * shifted. (A mismatch that puts the root and a receiver on different sides of
 * ETHBCAST_MPI_MAX_BYTES cannot be seen by either: the receiver waits for ETHBCAST_TIMEOUT_MS
 * and fails with MPI_ERR_OTHER.)
 *
 * Environment: ETHBCAST_IFACE (required), ETHBCAST_WAIT (block, adaptive, spin, doze;
 * default adaptive), ETHBCAST_ALGO (simple, pushpull, tree; default simple),
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
 * where). The settings above are the job's: every rank uses rank 0's, and rank 0 names the
 * ranks whose environment said otherwise in one warning per setting.
 *
 * Keys: ETHBCAST_KEY_FILE names the job's key file (written by `ethbcast keygen FILE`, mode
 * 0600, the same on every rank; read by ethbcast_open as the ethbcast command reads --key-file). With
 * a key every frame is authenticated. Without one, any host on the Ethernet segment can write
 * into MPI_Bcast buffers, release barriers or evict ranks: the job still uses ethbcast, and
 * the lowest keyless rank warns once for the job. With ETHBCAST_REQUIRE_KEY=1 and no key (or
 * a key file that cannot be read) ethbcast_open refuses, and the whole job uses the MPI's own
 * MPI_Bcast and MPI_Barrier with one warning: never keyless, never broken. */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

/* MPI's progress while a call waits on ethbcast. MPI requires an MPI call that blocks to let
 * other MPI communication progress: a peer's MPI_Send to this rank must complete while this
 * rank waits in MPI_Barrier (MPI 3.1, 3.5 "Progress"), and so must a peer's passive-target RMA
 * on this rank's window (11.7.3). Open MPI and MPICH progress only inside their own calls, and
 * a rank waiting on ethbcast makes none: a peer that needs this rank before it can reach the
 * collective would wait for it forever (MPICH's rma/linked_list did: capi/tests/mpich_suite.rs).
 * So while a call waits, a helper thread calls PMPI_Iprobe, which runs the MPI's progress
 * engine. It looks every 10 ms while calls come (each look wakes a thread: at one look per
 * millisecond, 8 ranks' 8-byte broadcasts took about 30% longer on the 2-core test-bed; at 10 ms
 * the difference is within the runs' spread); a call it finds waiting at two looks in a row
 * (10-20 ms) gets a probe then, and one per millisecond until it returns. A call costs two
 * uncontended atomic increments and a mutex. The helper needs MPI_THREAD_SERIALIZED (MPI_Init
 * asks for it): it calls MPI only while the rank's own calling thread is inside this library,
 * and a call returns only once a probe in flight has returned (the mutex). After a second
 * without a waiting call it sleeps until the next one. */
#define EBC_MP_PROBE_NS 1000000L
#define EBC_MP_LOOK_NS 10000000L
#define EBC_MP_IDLE_LOOKS 100
static pthread_t ebc_mp_thread;
static int ebc_mp_running = 0;
static pthread_mutex_t ebc_mp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ebc_mp_cv;
/* Odd while a call waits on ethbcast: incremented when it starts waiting and when it returns. */
static _Atomic unsigned long long ebc_mp_calls = 0;
static _Atomic int ebc_mp_sleeping = 0;
static int ebc_mp_stop = 0;
static unsigned long long ebc_mp_probes = 0;

static void *ebc_mp_main(void *arg) {
    (void)arg;
    unsigned long long seen = 0;
    int idle = 0;
    pthread_mutex_lock(&ebc_mp_mu);
    while (!ebc_mp_stop) {
        unsigned long long c = atomic_load(&ebc_mp_calls);
        int probing = 0;
        if (c & 1) {
            idle = 0;
            /* The same call has waited since the last look: let MPI progress, and look again
             * sooner while it waits. */
            if (c == seen) {
                int flag = 0;
                PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                            MPI_STATUS_IGNORE);
                ebc_mp_probes++;
                probing = 1;
            }
            seen = c;
        } else if (++idle >= EBC_MP_IDLE_LOOKS) {
            /* Nothing waited for a second: sleep until a call waits (ebc_wait_begin wakes us;
             * seq_cst on both sides: either we see its call or it sees us asleep). */
            atomic_store(&ebc_mp_sleeping, 1);
            while (!(atomic_load(&ebc_mp_calls) & 1) && !ebc_mp_stop)
                pthread_cond_wait(&ebc_mp_cv, &ebc_mp_mu);
            atomic_store(&ebc_mp_sleeping, 0);
            idle = 0;
            seen = 0;
            continue;
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += probing ? EBC_MP_PROBE_NS : EBC_MP_LOOK_NS;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&ebc_mp_cv, &ebc_mp_mu, &t);
    }
    pthread_mutex_unlock(&ebc_mp_mu);
    return NULL;
}

/* Starts the helper (only with MPI_THREAD_SERIALIZED or more). */
static void ebc_mp_start(int provided) {
    if (provided < MPI_THREAD_SERIALIZED)
        return;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&ebc_mp_cv, &a);
    pthread_condattr_destroy(&a);
    ebc_mp_running = pthread_create(&ebc_mp_thread, NULL, ebc_mp_main, NULL) == 0;
}

static void ebc_mp_stop_thread(void) {
    if (!ebc_mp_running)
        return;
    pthread_mutex_lock(&ebc_mp_mu);
    ebc_mp_stop = 1;
    pthread_cond_signal(&ebc_mp_cv);
    pthread_mutex_unlock(&ebc_mp_mu);
    pthread_join(ebc_mp_thread, NULL);
    ebc_mp_running = 0;
}

/* Around every ethbcast call that may wait for other ranks. */
static void ebc_wait_begin(void) {
    if (!ebc_mp_running)
        return;
    atomic_fetch_add(&ebc_mp_calls, 1);
    if (atomic_load(&ebc_mp_sleeping)) {
        pthread_mutex_lock(&ebc_mp_mu);
        pthread_cond_signal(&ebc_mp_cv);
        pthread_mutex_unlock(&ebc_mp_mu);
    }
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
    EBC_NSETTINGS
};
static const char *const ebc_setting_env[EBC_NSETTINGS] = {
    "ETHBCAST_MPI_MAX_BYTES", "ETHBCAST_ALGO",           "ETHBCAST_WAIT",
    "ETHBCAST_TIMEOUT_MS",    "ETHBCAST_ROOT_WAITS_ABOVE", "ETHBCAST_HOST_SPIN_US",
    "ETHBCAST_PROGRESS_THREAD", "ETHBCAST_GROUP_ID"};
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
        if ((v = set[EBC_S_WAIT]) != EBC_UNSET)
            opts.wait = v == EBC_INVALID ? UINT32_MAX : (uint32_t)v;
        opts.algorithm = ETHBCAST_ALGO_SIMPLE;
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
    /* A keyless job works, but any host on the segment can forge its traffic: say so once. */
    if (all[0]) {
        int kin[2] = {ethbcast_keyed(ebc_group) == 1, ebc_world_rank}, kall[2];
        PMPI_Allreduce(kin, kall, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
        if (!kall[0] && ebc_world_rank == kall[1])
            fprintf(stderr,
                    "ethbcast-mpi: rank %d: warning: no group key (ETHBCAST_KEY_FILE is not "
                    "set): every byte crosses the Ethernet segment in the clear, and any host "
                    "on it can write into MPI_Bcast buffers, "
                    "release barriers or evict ranks. Set ETHBCAST_KEY_FILE to a key file "
                    "(ethbcast keygen FILE) on every rank; ETHBCAST_REQUIRE_KEY=1 refuses "
                    "to run without one\n",
                    ebc_world_rank);
    }
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
                "%llu MPI progress probes while waiting\n",
                ebc_world_rank, ebc_calls_hw, ebc_calls_pmpi,
                (unsigned long long)ebc_final.background_polls, ebc_max_bytes, ebc_link_rate,
                ebc_mp_probes);
    return PMPI_Finalize();
}
