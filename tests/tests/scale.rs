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
    /// TCP transport connections opened and accepted at init, and after the barriers.
    xout: usize,
    xin: usize,
    xout_b: usize,
    xin_b: usize,
    /// TCP sockets after the barriers.
    tcp_b: usize,
    /// Local PEs whose heap / control heap is mapped in this PE: at init, after the barriers,
    /// after the ring put.
    hmap: usize,
    cmap: usize,
    cmap_b: usize,
    hmap_r: usize,
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
                xout: field("xout") as usize,
                xin: field("xin") as usize,
                xout_b: field("xout_b") as usize,
                xin_b: field("xin_b") as usize,
                tcp_b: field("tcp_b") as usize,
                hmap: field("hmap") as usize,
                cmap: field("cmap") as usize,
                cmap_b: field("cmap_b") as usize,
                hmap_r: field("hmap_r") as usize,
            }
        })
        .collect()
}

fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

/// Runs `rshmem-testpe scale 5` on `n` PEs of the CPU backend with small heaps (every PE its
/// own node when `own_nodes`) and returns the job and every PE's SCALE line.
fn run_scale(n: usize, own_nodes: bool) -> (common::Run, Vec<Pe>) {
    run_scale_with(n, own_nodes, &[])
}

fn run_scale_with(n: usize, own_nodes: bool, env: &[(&str, &str)]) -> (common::Run, Vec<Pe>) {
    let mut job = common::job(n, "scale");
    for (k, v) in env {
        job = job.env(k, v);
    }
    job = job
        .arg("5")
        .env("RSHMEM_HEAP_INITIAL", "2M")
        .env("RSHMEM_HEAP_LIMIT", "16M")
        .env("RSHMEM_BACKEND", "cpu")
        .env("RSHMEM_TIMEOUT", "120")
        .timeout(240);
    if own_nodes {
        job = job.env("RSHMEM_DISABLE_P2P", "1");
    }
    let r = job.run();
    r.assert_ok(0..n, "scale");
    let pes = parse(&r.stdout);
    r.check(pes.len() == n, "every PE prints its SCALE line");
    (r, pes)
}

fn scale(n: usize) {
    let (r, pes) = run_scale(n, false);
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
        // Every socket is a bootstrap link (TCP) or a node link (Unix), and there are both: a
        // count that classifies nothing would pass the bounds above.
        r.check(
            p.tcp + p.unix == p.sockets && p.tcp > 0 && p.unix > 0,
            &format!(
                "PE {}: {} sockets, of which {} TCP and {} Unix (each socket must be one or the other, both kinds present)",
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

/// The barrier partners of `pe` among `n` PEs: `pe ± 2^k` (k < ⌈log2 n⌉), each once.
fn partners(pe: usize, n: usize) -> usize {
    let mut p: Vec<usize> = (0..ceil_log2(n))
        .flat_map(|j| [(pe + (1 << j)) % n, (pe + n - (1 << j)) % n])
        .collect();
    p.sort_unstable();
    p.dedup();
    p.len()
}

/// Lazy mapping (the default on the CPU backend): at init a PE maps no other PE's heap and
/// only its barrier partners' control heaps, not all N − 1 of each; after the ring put it maps
/// exactly one heap, its successor's (before 2026-11-29 every PE mapped every local PE's
/// chunks at init). With `RSHMEM_LAZY_MAPPING=0` every PE maps all of them at init, and the
/// same ring put works.
fn lazy_mapping(n: usize) {
    let (r, pes) = run_scale(n, false);
    for p in &pes {
        r.check(
            p.hmap == 0 && p.cmap <= partners(p.pe, n) + 1 && p.cmap_b <= partners(p.pe, n) + 1,
            &format!(
                "PE {}: {} heaps and {} / {} control heaps of local PEs mapped at init / after the barriers: expected no heap and at most its {} barrier partners' control heaps",
                p.pe, p.hmap, p.cmap, p.cmap_b, partners(p.pe, n)
            ),
        );
        r.check(
            p.hmap_r == 1,
            &format!(
                "PE {} maps {} other heaps after putting to its successor only: expected 1",
                p.pe, p.hmap_r
            ),
        );
    }
    let (r, pes) = run_scale_with(n, false, &[("RSHMEM_LAZY_MAPPING", "0")]);
    for p in &pes {
        r.check(
            p.hmap == n - 1 && p.cmap == n - 1 && p.hmap_r == n - 1,
            &format!(
                "PE {} with RSHMEM_LAZY_MAPPING=0 maps {} heaps and {} control heaps at init: expected all {}",
                p.pe, p.hmap, p.cmap, n - 1
            ),
        );
    }
}

#[test]
fn lazy_mapping_16pes() {
    lazy_mapping(16);
}

#[test]
fn scale_6pes() {
    scale(6);
}

#[test]
fn scale_32pes() {
    scale(32);
}

/// Every PE its own node (`RSHMEM_DISABLE_P2P=1`), so every other PE is reached over rshmem's
/// TCP transport: after init and after the barriers each PE holds transport connections only
/// to and from its barrier partners (`me ± 2^k`: 2⌈log2 N⌉ − 1 each way at N = 2^j), not to all N − 1 PEs
/// (before 2026-11-28: 15 outgoing and 15 incoming at 16 PEs, one service thread each).
fn scale_tcp(n: usize) {
    let (r, pes) = run_scale(n, true);
    let k = ceil_log2(n);
    for p in &pes {
        let want = partners(p.pe, n);
        r.check(
            p.xout == want && p.xin <= want && p.xout_b == want && p.xin_b == want,
            &format!(
                "PE {} holds {} / {} TCP transport connections out / in after init and {} / {} after the barriers: expected {want} each way (its barrier partners)",
                p.pe, p.xout, p.xin, p.xout_b, p.xin_b
            ),
        );
        // Bootstrap links (2·⌈log2 N⌉), transport connections (2 × 2·⌈log2 N⌉), and a few that
        // are neither (listeners, the launcher's; 5 at 16 PEs).
        r.check(
            p.tcp <= 6 * k + 6 && p.tcp_b <= 6 * k + 6,
            &format!(
                "PE {} holds {} TCP sockets after init, {} after the barriers: more than the {} of {n} PEs",
                p.pe,
                p.tcp,
                p.tcp_b,
                6 * k + 6
            ),
        );
    }
}

#[test]
fn scale_tcp_16pes() {
    scale_tcp(16);
}
