//! cudarc interop on the CPU backend (what can be checked without a GPU): `SymBuf::device`
//! refuses host memory with a clear error instead of handing cudarc a host address.

#[test]
fn device_view_needs_the_gpu_heap() {
    // A singleton job on the CPU backend (no launcher variables are set under cargo test).
    std::env::set_var("RSHMEM_BACKEND", "cpu");
    let world = rshmem::init().expect("singleton init");
    let buf = world.calloc::<f32>(16).unwrap();
    match buf.device() {
        Err(rshmem::Error::Unsupported { call, reason }) => {
            assert_eq!(call, "SymBuf::device");
            assert!(reason.contains("host memory"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    world.free(buf).unwrap();
    world.finalize().unwrap();
}
