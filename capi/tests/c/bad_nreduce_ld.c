/* bad_nreduce.c for the C-combined long double reductions. */
#define BAD_NREDUCE_LD
#include "bad_nreduce.c"
