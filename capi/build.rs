//! Link options of `libshmem.so`, and the C part of the library (`src/combine.c`: the
//! arithmetic of `long double` and complex reductions, which Rust does not have).

fn main() {
    // The profiling interface (src/profiling.rs): `pshmem_NAME` of a hand-written routine calls
    // the library's own `shmem_NAME`. Binding function references inside the library at link
    // time keeps that call from reaching a tool's `shmem_NAME` interposed before libshmem,
    // which calls `pshmem_NAME` and would recurse.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/combine.c");
    cc::Build::new()
        .file("src/combine.c")
        .flag_if_supported("-std=c11")
        .opt_level(2)
        .compile("rshmem_capi_combine");
}
