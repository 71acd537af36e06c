# CMake package of rshmem, installed by scripts/install-c into PREFIX/lib/cmake/rshmem.
#
#   find_package(rshmem REQUIRED)              # CMAKE_PREFIX_PATH=PREFIX or -Drshmem_DIR=...
#   target_link_libraries(app PRIVATE rshmem::rshmem)
#
# Imported targets:
#   rshmem::rshmem          librshmem.so: rshmem.h (host API; under nvcc also the device library)
#   rshmem::rshmem_static   librshmem.a with the system libraries it needs
#   rshmem::nvshmem_compat  rshmem::rshmem plus the include folder of nvshmem.h / nvshmemx.h
#   rshmem::shmem           libshmem.so: the OpenSHMEM 1.6 C ABI (shmem.h), CPU backend
#   rshmem::shmem_static    libshmem.a with the system libraries it needs
#   rshmem::rshmemrun       the launcher (an imported executable)
# Variables: rshmem_VERSION, rshmem_PREFIX, rshmem_INCLUDE_DIR, rshmem_NVSHMEM_INCLUDE_DIR,
# rshmem_LIBRARY_DIR, rshmem_RSHMEMRUN.
#
# Kernels compiled by nvcc need no separable compilation (-rdc): every translation unit that
# includes rshmem.h gets the device state at init (docs/c-cuda.md).

get_filename_component(_rshmem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

set(rshmem_PREFIX "${_rshmem_prefix}")
set(rshmem_INCLUDE_DIR "${_rshmem_prefix}/include")
set(rshmem_NVSHMEM_INCLUDE_DIR "${_rshmem_prefix}/include/nvshmem")
set(rshmem_LIBRARY_DIR "${_rshmem_prefix}/lib")
set(rshmem_RSHMEMRUN "${_rshmem_prefix}/bin/rshmemrun")

foreach(_rshmem_file
    "${rshmem_INCLUDE_DIR}/rshmem.h" "${rshmem_INCLUDE_DIR}/rshmem/type_lists.h"
    "${rshmem_INCLUDE_DIR}/shmem.h"
    "${rshmem_LIBRARY_DIR}/librshmem.so" "${rshmem_LIBRARY_DIR}/librshmem.a"
    "${rshmem_LIBRARY_DIR}/libshmem.so" "${rshmem_LIBRARY_DIR}/libshmem.a"
    "${rshmem_RSHMEMRUN}")
  if(NOT EXISTS "${_rshmem_file}")
    set(rshmem_FOUND FALSE)
    set(rshmem_NOT_FOUND_MESSAGE
        "rshmem at ${_rshmem_prefix} is incomplete: ${_rshmem_file} is missing (reinstall with scripts/install-c)")
    unset(_rshmem_file)
    unset(_rshmem_prefix)
    return()
  endif()
endforeach()
unset(_rshmem_file)

# What a Rust static library needs from the system (the C runtime's own libraries).
set(_rshmem_system_libs pthread dl m rt util gcc_s)

if(NOT TARGET rshmem::rshmem)
  add_library(rshmem::rshmem SHARED IMPORTED)
  set_target_properties(rshmem::rshmem PROPERTIES
    IMPORTED_LOCATION "${rshmem_LIBRARY_DIR}/librshmem.so"
    IMPORTED_SONAME "librshmem.so.0"
    INTERFACE_INCLUDE_DIRECTORIES "${rshmem_INCLUDE_DIR}")

  add_library(rshmem::rshmem_static STATIC IMPORTED)
  set_target_properties(rshmem::rshmem_static PROPERTIES
    IMPORTED_LOCATION "${rshmem_LIBRARY_DIR}/librshmem.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${rshmem_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${_rshmem_system_libs}")

  add_library(rshmem::nvshmem_compat INTERFACE IMPORTED)
  set_target_properties(rshmem::nvshmem_compat PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${rshmem_NVSHMEM_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES rshmem::rshmem)

  add_library(rshmem::shmem SHARED IMPORTED)
  set_target_properties(rshmem::shmem PROPERTIES
    IMPORTED_LOCATION "${rshmem_LIBRARY_DIR}/libshmem.so"
    # libshmem.so has no SONAME: link it as -lshmem, not by its path.
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${rshmem_INCLUDE_DIR}")

  add_library(rshmem::shmem_static STATIC IMPORTED)
  set_target_properties(rshmem::shmem_static PROPERTIES
    IMPORTED_LOCATION "${rshmem_LIBRARY_DIR}/libshmem.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${rshmem_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${_rshmem_system_libs}")

  add_executable(rshmem::rshmemrun IMPORTED)
  set_target_properties(rshmem::rshmemrun PROPERTIES IMPORTED_LOCATION "${rshmem_RSHMEMRUN}")
endif()

unset(_rshmem_system_libs)
unset(_rshmem_prefix)
