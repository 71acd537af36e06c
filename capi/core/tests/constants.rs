//! The C constants both C APIs and the device library share are defined once, in
//! `device-lib/include/rshmem/type_lists.h`; this test checks the comparison and signal codes
//! there against the runtime's one table (`rshmem::wire`) and against what the C core accepts.
//! (The device library is also checked against `rshmem::wire` by the host/device contract,
//! `runtime/tests/device_compile.rs`, which needs NVRTC; this test needs nothing.)

use std::collections::BTreeMap;

use capi_core::Abi;
use rshmem::wire::{CmpCode, SignalCode};

/// `#define NAME VALUE` lines of `text` whose name starts with `prefix`.
fn defines(text: &str, prefix: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define")).then_some(())?;
            let name = w.next()?;
            let value = w.next()?;
            name.starts_with(prefix)
                .then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

fn type_lists() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../device-lib/include/rshmem/type_lists.h");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn comparison_and_signal_codes_are_the_runtimes() {
    let text = type_lists();
    let check = |prefix: &str, runtime: Vec<(&str, i32)>| {
        let header = defines(&text, prefix);
        let want: BTreeMap<String, String> = runtime
            .iter()
            .map(|(n, c)| (n.to_string(), c.to_string()))
            .collect();
        assert_eq!(
            header, want,
            "rshmem/type_lists.h's {prefix}* and rshmem::wire disagree"
        );
        for (name, code) in runtime {
            assert!(
                Abi::Rshmem.cmp_of(code).is_ok() || Abi::Rshmem.sigop_of(code).is_ok(),
                "{name} = {code} is refused by the C core"
            );
        }
    };
    check(
        "RSHMEM_CMP_",
        CmpCode::ALL.iter().map(|&(v, n)| (n, v.code())).collect(),
    );
    check(
        "RSHMEM_SIGNAL_",
        SignalCode::ALL
            .iter()
            .map(|&(v, n)| (n, v.code()))
            .collect(),
    );
    // The C core takes exactly these codes.
    assert!(Abi::Shmem.cmp_of(CmpCode::ALL.len() as i32).is_err());
    assert!(Abi::Shmem.sigop_of(SignalCode::ALL.len() as i32).is_err());
}
