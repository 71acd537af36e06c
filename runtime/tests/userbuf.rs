//! Symmetric registration of user buffers on the CPU backend (what can be checked without a
//! GPU): both calls are refused with `Unsupported`, naming the call and the backend, and the
//! world stays usable. The GPU path is checked by `examples/cuda/user_buffer_symmetric.cu`
//! (scripts/userbuf-gpu-check) on a GPU machine.

#[test]
fn cpu_backend_refuses_symmetric_registration() {
    // A singleton job on the CPU backend (no launcher variables are set under cargo test).
    std::env::set_var("RSHMEM_BACKEND", "cpu");
    let world = rshmem::init().expect("singleton init");
    let mut host = vec![0u8; 2 << 20];
    let p = host.as_mut_ptr().cast::<std::ffi::c_void>();
    match world.register_buffer_symmetric(p, host.len()) {
        Err(rshmem::Error::Unsupported { call, reason }) => {
            assert_eq!(call, "register_buffer_symmetric");
            assert!(reason.contains("GPU backend"), "{reason}");
            assert!(reason.contains("CPU backend"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    match world.unregister_buffer_symmetric(p, host.len()) {
        Err(rshmem::Error::Unsupported { call, reason }) => {
            assert_eq!(call, "unregister_buffer_symmetric");
            assert!(reason.contains("GPU backend"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Nothing was left half-done: allocation and a collective still work.
    let buf = world.calloc::<u64>(4).unwrap();
    world.barrier_all().unwrap();
    assert_eq!(buf.len(), 4);
    world.finalize().unwrap();
}
