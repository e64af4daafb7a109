/* Generated in MPICH's own tree (maint/gen_binding_c.py); outside it MPICH's test/mpi/autogen.sh
 * leaves it empty, as here: no MPIX extensions are used. */
