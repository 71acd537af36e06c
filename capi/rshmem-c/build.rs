//! Link options of `librshmem.so`.

fn main() {
    // The shared library's soname, so that programs linked with `-lrshmem` record
    // `librshmem.so` (and find it through their rpath or LD_LIBRARY_PATH after installation).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librshmem.so");
    println!("cargo:rerun-if-changed=build.rs");
}
