//! Start-up at scale on one host (CPU backend, small heaps): the `scale` scenario on 32 PEs
//! (and 6, a size that is no power of two). No PE may hold more than `O(log N)` sockets after
//! init (the bootstrap's links to PEs `me ± 2^k` and the node's Unix links to local PEs
//! `me ± 2^k`; before 2026-11-28 every PE held one Unix socket per local peer, twice, and rank
//! 0 one TCP connection per PE), and rank 0 may not use more than twice the resident memory of
//! the median other PE. The big runs (64 to 1,024 PEs) are `scripts/scale-test`; their figures
//! are in docs/bench/scale.md and docs/launching.md.

mod common;

/// One PE's `SCALE` line.
#[derive(Debug)]
struct Pe {
    pe: usize,
    rss_kib: u64,
    sockets: usize,
    tcp: usize,
    unix: usize,
}

fn parse(stdout: &str) -> Vec<Pe> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("SCALE "))
        .map(|l| {
            let field = |name: &str| -> u64 {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.split('.').next()?.parse().ok())
                    .unwrap_or_else(|| panic!("no {name}= in {l:?}"))
            };
            Pe {
                pe: field("pe") as usize,
                rss_kib: field("rss_kib"),
                sockets: field("sockets") as usize,
                tcp: field("tcp") as usize,
                unix: field("unix") as usize,
            }
        })
        .collect()
}

fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

fn scale(n: usize) {
    let r = common::job(n, "scale")
        .arg("5")
        .env("RSHMEM_HEAP_INITIAL", "2M")
        .env("RSHMEM_HEAP_LIMIT", "16M")
        .env("RSHMEM_BACKEND", "cpu")
        .env("RSHMEM_TIMEOUT", "120")
        .timeout(240)
        .run();
    r.assert_ok(0..n, "scale");
    let pes = parse(&r.stdout);
    r.check(pes.len() == n, "every PE prints its SCALE line");
    let links = 2 * ceil_log2(n);
    for p in &pes {
        // Bootstrap links (TCP) and node links (Unix), both 2·ceil(log2 N); a few more for
        // what is not a link (the liveness watch's pidfds are no sockets).
        r.check(
            p.tcp <= links && p.unix <= links && p.sockets <= 2 * links + 2,
            &format!(
                "PE {} holds {} sockets after init ({} TCP, {} Unix): more than the 2 x {links} links of {n} PEs",
                p.pe, p.sockets, p.tcp, p.unix
            ),
        );
    }
    let mut others: Vec<u64> = pes
        .iter()
        .filter(|p| p.pe != 0)
        .map(|p| p.rss_kib)
        .collect();
    others.sort_unstable();
    let median = others[others.len() / 2];
    let rank0 = pes.iter().find(|p| p.pe == 0).map_or(0, |p| p.rss_kib);
    r.check(
        rank0 <= 2 * median,
        &format!("rank 0's resident memory ({rank0} KiB) is more than twice the median other PE's ({median} KiB)"),
    );
}

#[test]
fn scale_6pes() {
    scale(6);
}

#[test]
fn scale_32pes() {
    scale(32);
}
