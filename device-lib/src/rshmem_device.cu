// librshmem_device.a: the device library's one translation unit for programs built with
// separable compilation (nvcc -rdc=true or -dc, and a device link). Such a program's units only
// declare the device state (rshmem/state.cuh under __CUDACC_RDC__); this unit defines it, once
// for the whole program, and registers the one function that copies a state into it (the
// rshmem runtime calls it at init, after heap growth and at finalize, as for every unit of a
// program built without -rdc). Everything else of the device library stays in the headers.
//
// Built by scripts/install-c (when it finds nvcc) into PREFIX/lib/librshmem_device.a:
//
//     nvcc -rdc=true -gencode ... -I device-lib/include -c device-lib/src/rshmem_device.cu
//     nvcc -lib rshmem_device.o -o librshmem_device.a
//
// and linked by programs at their device link: nvcc -rdc=true a.o b.o -lrshmem_device -lrshmem.
#define RSHMEM_DEVICE_LIBRARY_BUILD 1
#include "rshmem/state.cuh"

#if !defined(__CUDACC_RDC__)
#error "rshmem_device.cu is the device library of -rdc programs: compile it with nvcc -rdc=true"
#endif

// The host symbol every -rdc unit of a program refers to (state.cuh), so that the linker takes
// this unit's host half (the registration above) into the program.
extern "C" int rshmem_rdc_program_needs_librshmem_device;
int rshmem_rdc_program_needs_librshmem_device = 1;
