//! Link options of `libshmem.so`.

fn main() {
    // The profiling interface (src/profiling.rs): `pshmem_NAME` of a hand-written routine calls
    // the library's own `shmem_NAME`. Binding function references inside the library at link
    // time keeps that call from reaching a tool's `shmem_NAME` interposed before libshmem,
    // which calls `pshmem_NAME` and would recurse.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");
}
