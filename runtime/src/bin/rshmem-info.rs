//! `rshmem-info`: prints the version, the transports of this build and every environment
//! variable rshmem reads (`--markdown` prints the variable table as Markdown for the docs).

use std::io::Write;

fn main() {
    let markdown = std::env::args().any(|a| a == "--markdown");
    let mut out = String::new();
    if markdown {
        out.push_str("| variable | type | default | meaning |\n|---|---|---|---|\n");
        for v in rshmem::config::all_env_vars() {
            let cell = |t: &str| t.replace('|', "\\|");
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                v.name,
                cell(v.kind),
                cell(v.default),
                cell(v.help)
            ));
        }
    } else {
        out.push_str(&format!(
            "rshmem {}\ntransports: shm (host shared memory), p2p (GPU memory over NVLink/PCIe, when CUDA GPUs are present), tcp (other hosts), verbs (other hosts, with the verbs feature), ucx (other hosts, libucp loaded at run time)\n\n",
            env!("CARGO_PKG_VERSION")
        ));
        // UCX: loaded the way the UCX transport loads it (RSHMEM_UCX_LIB or libucp.so.0), under
        // the UCX_* variables of this environment.
        let lib = std::env::var("RSHMEM_UCX_LIB")
            .ok()
            .filter(|s| !s.trim().is_empty());
        match rshmem::probe_ucx(lib.as_deref()) {
            Ok(p) => {
                let (a, b, c) = p.version;
                out.push_str(&format!(
                    "ucx: UCX {a}.{b}.{c} from {}\n  resources: {}\n  RDMA (InfiniBand/RoCE): {}\n  RSHMEM_REMOTE_TRANSPORT=auto uses it for PEs on other hosts: {}\n\n",
                    p.path,
                    p.resources.join(", "),
                    if p.rdma() { "yes" } else { "no" },
                    if p.rdma() {
                        "yes (CPU backend), where both PEs have it and verbs is not used"
                    } else {
                        "no (rshmem's TCP transport; RSHMEM_REMOTE_TRANSPORT=ucx forces UCX)"
                    }
                ));
            }
            Err(e) => out.push_str(&format!("ucx: not available ({e})\n\n")),
        }
        out.push_str("environment variables:\n");
        for v in rshmem::config::all_env_vars() {
            let now = std::env::var(v.name)
                .map(|s| format!(" (set: {s})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<28} {} [default: {}]{now}\n      {}\n",
                v.name, v.kind, v.default, v.help
            ));
        }
    }
    // A closed pipe (`rshmem-info | head`) is not an error worth reporting.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}
