/* Written by hand for ethbcast (MPICH's configure generates it from mpitestconf.h.in): only
 * the defines the vendored files test, for Linux with Open MPI 4.1 or MPICH 4.0. */
#ifndef MPITESTCONF_H_INCLUDED
#define MPITESTCONF_H_INCLUDED
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
/* POSIX threads for the threaded tests (util/mtest_thread.c); the others link
 * util/mtest_single.c. */
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#define HAVE_PTHREAD_BARRIER_INIT 1
#endif
