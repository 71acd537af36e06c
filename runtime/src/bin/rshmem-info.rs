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
            "rshmem {}\ntransports: shm (host shared memory), p2p (GPU memory over NVLink/PCIe, when CUDA GPUs are present)\n\nenvironment variables:\n",
            env!("CARGO_PKG_VERSION")
        ));
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
