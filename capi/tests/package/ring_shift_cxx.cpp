// ring_shift.c compiled as C++: rshmem.h must be usable from C++ (extern "C" linkage).
#include "ring_shift.c"
