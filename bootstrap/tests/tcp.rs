//! TcpBootstrap with every rank as a thread of this process.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rshmem_bootstrap::{Bootstrap, Error, TcpBootstrap, UniqueId};

/// Binds a fresh loopback listener and a unique id for it.
fn job() -> (TcpListener, UniqueId) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let uid = UniqueId::new(l.local_addr().unwrap().to_string()).unwrap();
    (l, uid)
}

/// Runs `body` on ranks `ranks` of a job of `size` (rank 0 gets the listener) and returns each
/// rank's result, in the order of `ranks`.
fn run_ranks<R: Send + 'static>(
    size: usize,
    ranks: &[usize],
    timeout: Option<Duration>,
    body: impl Fn(usize, rshmem_bootstrap::Result<TcpBootstrap>) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let (listener, uid) = job();
    let mut listener = Some(listener);
    let body = Arc::new(body);
    let handles: Vec<_> = ranks
        .iter()
        .map(|&rank| {
            let l = if rank == 0 { listener.take() } else { None };
            let uid = uid.clone();
            let body = Arc::clone(&body);
            thread::spawn(move || body(rank, TcpBootstrap::new(rank, size, &uid, timeout, l)))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}

fn payload(rank: usize, round: usize) -> Vec<u8> {
    // Rank 0 contributes nothing in round 0; lengths differ by rank and round.
    let len = rank * 37 + round * 5 + (rank % 2) * 3000;
    (0..len)
        .map(|i| (i * 31 + rank * 7 + round) as u8)
        .collect()
}

fn to_each(from: usize, to: usize, size: usize) -> Vec<u8> {
    format!("{from}->{to}/{size};")
        .repeat(from + 2 * to)
        .into_bytes()
}

#[test]
fn collectives_for_1_to_5_ranks() {
    for size in 1..=5 {
        let all: Vec<usize> = (0..size).collect();
        let results = run_ranks(size, &all, Some(Duration::from_secs(20)), move |rank, b| {
            let b = b?;
            assert_eq!((b.rank(), b.size()), (rank, size));
            for round in 0..3 {
                let got = b.allgather(&payload(rank, round))?;
                let want: Vec<Vec<u8>> = (0..size).map(|r| payload(r, round)).collect();
                assert_eq!(got, want, "allgather size {size} rank {rank} round {round}");

                let send: Vec<Vec<u8>> = (0..size).map(|d| to_each(rank, d, size)).collect();
                let got = b.alltoall(&send)?;
                let want: Vec<Vec<u8>> = (0..size).map(|s| to_each(s, rank, size)).collect();
                assert_eq!(got, want, "alltoall size {size} rank {rank} round {round}");

                for root in 0..size {
                    let data = if rank == root {
                        payload(root + 10, round)
                    } else {
                        b"ignored on non-roots".to_vec()
                    };
                    let got = b.broadcast(root, &data)?;
                    assert_eq!(got, payload(root + 10, round), "broadcast root {root}");
                }
                b.barrier()?;
            }
            rshmem_bootstrap::Result::Ok(())
        });
        for (rank, r) in results.into_iter().enumerate() {
            if let Err(e) = r {
                panic!("size {size} rank {rank}: {e}");
            }
        }
    }
}

#[test]
fn bootstrap_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TcpBootstrap>();
    let _: Box<dyn Bootstrap> = Box::new(rshmem_bootstrap::SingletonBootstrap::new());
}

#[test]
fn invalid_arguments() {
    let (l, uid) = job();
    let inval = |r: rshmem_bootstrap::Result<TcpBootstrap>| {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    };
    inval(TcpBootstrap::new(0, 0, &uid, None, None));
    inval(TcpBootstrap::new(3, 3, &uid, None, None));
    inval(TcpBootstrap::new(0, 2, &uid, Some(Duration::ZERO), None));
    inval(TcpBootstrap::new(1, 2, &uid, None, Some(l)));
    // One rank: nothing to connect to, collectives are local, argument checks still apply.
    let b = TcpBootstrap::new(0, 1, &uid, Some(Duration::from_secs(1)), None).unwrap();
    assert_eq!(b.timeout(), Some(Duration::from_secs(1)));
    assert_eq!(b.allgather(b"x").unwrap(), vec![b"x".to_vec()]);
    assert!(matches!(
        b.alltoall(&[vec![], vec![]]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.broadcast(1, b""),
        Err(Error::InvalidArgument(_))
    ));
    b.barrier().unwrap();
}

#[test]
fn wrong_secret_and_bad_peers_are_refused_while_real_ranks_join() {
    let (listener, uid) = job();
    let timeout = Some(Duration::from_secs(20));
    let size = 3;
    let root = {
        let uid = uid.clone();
        thread::spawn(move || {
            let b = TcpBootstrap::new(0, size, &uid, timeout, Some(listener))?;
            b.allgather(b"zero")
        })
    };
    // Garbage that is not our protocol, then a connection that says nothing and closes.
    let mut junk = TcpStream::connect(uid.addr()).unwrap();
    junk.write_all(b"GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        .unwrap();
    drop(TcpStream::connect(uid.addr()).unwrap());
    // Same address, another job's secret.
    let mut other_secret = *uid.secret();
    other_secret[0] ^= 1;
    let rogue = UniqueId::with_secret(uid.addr(), other_secret).unwrap();
    match TcpBootstrap::new(1, size, &rogue, timeout, None) {
        Err(Error::Refused(m)) => assert!(m.contains("secret"), "{m}"),
        other => panic!("wrong secret was not refused: {other:?}"),
    }
    // Right secret, wrong job size; and a rank outside the job.
    match TcpBootstrap::new(1, size + 1, &uid, timeout, None) {
        Err(Error::Refused(m)) => assert!(m.contains("size"), "{m}"),
        other => panic!("wrong size was not refused: {other:?}"),
    }
    match TcpBootstrap::new(3, 4, &uid, timeout, None) {
        Err(Error::Refused(_)) => {}
        other => panic!("out-of-range rank was not refused: {other:?}"),
    }
    drop(junk);
    // The real ranks still get in and work.
    let peers: Vec<_> = (1..size)
        .map(|rank| {
            let uid = uid.clone();
            thread::spawn(move || {
                let b = TcpBootstrap::new(rank, size, &uid, timeout, None)?;
                b.allgather(format!("r{rank}").as_bytes())
            })
        })
        .collect();
    let want = vec![b"zero".to_vec(), b"r1".to_vec(), b"r2".to_vec()];
    assert_eq!(root.join().unwrap().unwrap(), want);
    for p in peers {
        assert_eq!(p.join().unwrap().unwrap(), want);
    }
}

#[test]
fn duplicate_rank_is_refused() {
    let (listener, uid) = job();
    let size = 3;
    let timeout = Some(Duration::from_secs(20));
    let start = |rank: usize, l: Option<TcpListener>| {
        let uid = uid.clone();
        thread::spawn(move || {
            TcpBootstrap::new(rank, size, &uid, timeout, l).and_then(|b| b.allgather(&[rank as u8]))
        })
    };
    let root = start(0, Some(listener));
    // Two processes both claim rank 1 while rank 2 is not there yet (so the job cannot be
    // complete): whichever comes second is refused.
    let ones = [start(1, None), start(1, None)];
    let t = Instant::now();
    while !ones.iter().any(|h| h.is_finished()) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no rank-1 claim was refused"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let two = start(2, None);
    let want = vec![vec![0], vec![1], vec![2]];
    let mut refused = 0;
    for h in ones {
        match h.join().unwrap() {
            Err(Error::Refused(m)) => {
                assert!(m.contains("already joined"), "{m}");
                refused += 1;
            }
            Ok(v) => assert_eq!(v, want),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(refused, 1);
    assert_eq!(root.join().unwrap().unwrap(), want);
    assert_eq!(two.join().unwrap().unwrap(), want);
}

#[test]
fn missing_rank_times_out_naming_exactly_it() {
    let timeout = Duration::from_millis(400);
    let start = Instant::now();
    // Rank 2 of 3 never starts.
    let results = run_ranks(3, &[0, 1], Some(timeout), |_, b| b.map(|_| ()));
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(Error::Timeout {
                missing, waited, ..
            }) => {
                assert_eq!(missing, &vec![2], "rank {rank}");
                assert_eq!(*waited, timeout);
            }
            other => panic!("rank {rank}: expected Timeout, got {other:?}"),
        }
    }
    let msg = results[0].as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("timed out after 0.4s waiting for rank(s) 2"),
        "{msg}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));

    // Ranks 2 and 4 of 5 never start.
    let results = run_ranks(5, &[0, 1, 3], Some(timeout), |_, b| b.map(|_| ()));
    for r in &results {
        assert!(
            matches!(r, Err(Error::Timeout { missing, .. }) if missing == &vec![2, 4]),
            "{r:?}"
        );
    }
}

#[test]
fn rank_that_skips_a_collective_times_out() {
    // Long enough that connecting never times out on a loaded 2-core machine, so the timeout
    // that fires is the barrier's.
    let timeout = Duration::from_millis(1500);
    let results = run_ranks(3, &[0, 1, 2], Some(timeout), |rank, b| {
        let b = b?;
        if rank == 2 {
            // Late: arrives after the others have given up.
            thread::sleep(Duration::from_millis(4000));
        }
        b.barrier()
    });
    for (rank, r) in results.iter().enumerate().take(2) {
        assert!(
            matches!(r, Err(Error::Timeout { op, missing, .. }) if op == "barrier" && missing == &vec![2]),
            "rank {rank}: {r:?}"
        );
    }
    assert!(
        results[2].is_err(),
        "the late rank must not succeed: {:?}",
        results[2]
    );
}

#[test]
fn no_rank_zero_times_out_naming_it_and_the_address() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }; // closed again: nobody listens there
    let uid = UniqueId::new(addr.clone()).unwrap();
    let t = Instant::now();
    let e = TcpBootstrap::new(1, 2, &uid, Some(Duration::from_millis(300)), None).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3));
    match &e {
        Error::Timeout { missing, .. } => assert_eq!(missing, &vec![0]),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(&addr), "{e}");
    // The last real failure, not "no attempt made" (which the deadline expiring during the
    // pause between attempts once produced).
    assert!(
        e.to_string().contains("Connection refused") && !e.to_string().contains("no attempt"),
        "{e}"
    );
}

#[test]
fn dropped_peer_is_reported_as_lost() {
    let results = run_ranks(3, &[0, 1, 2], Some(Duration::from_secs(20)), |rank, b| {
        let b = b?;
        if rank == 2 {
            drop(b); // the process "dies" after joining
            return Ok(Vec::new());
        }
        b.allgather(b"data")
    });
    for (rank, r) in results.iter().enumerate().take(2) {
        match r {
            Err(Error::PeerLost { rank: lost, .. }) => assert_eq!(*lost, 2, "rank {rank}"),
            other => panic!("rank {rank}: expected PeerLost(2), got {other:?}"),
        }
    }
}

#[test]
fn lost_rank_zero_is_reported_by_peers() {
    let results = run_ranks(2, &[0, 1], Some(Duration::from_secs(20)), |rank, b| {
        let b = b?;
        if rank == 0 {
            drop(b);
            return Ok(());
        }
        b.barrier()
    });
    assert!(
        matches!(results[1], Err(Error::PeerLost { rank: 0, .. })),
        "{:?}",
        results[1]
    );
}

#[test]
fn mismatched_collectives_are_a_protocol_error() {
    let results = run_ranks(2, &[0, 1], Some(Duration::from_secs(20)), |rank, b| {
        let b = b?;
        if rank == 0 {
            b.barrier()
        } else {
            b.allgather(b"x").map(|_| ())
        }
    });
    for r in &results {
        assert!(
            matches!(r, Err(Error::Protocol(m)) if m.contains("allgather")),
            "{r:?}"
        );
    }
}

#[test]
fn broadcast_with_disagreeing_roots_fails() {
    let results = run_ranks(2, &[0, 1], Some(Duration::from_secs(20)), |rank, b| {
        b?.broadcast(rank, b"x")
    });
    for r in &results {
        assert!(
            matches!(r, Err(Error::Protocol(m)) if m.contains("root")),
            "{r:?}"
        );
    }
}

#[test]
fn small_allgather_on_8_ranks_is_fast() {
    const ITERS: u32 = 300;
    let results = run_ranks(
        8,
        &(0..8).collect::<Vec<_>>(),
        Some(Duration::from_secs(30)),
        |rank, b| {
            let b = b?;
            b.barrier()?;
            let t = Instant::now();
            for i in 0..ITERS {
                let v = b.allgather(&[rank as u8, i as u8, 0, 0, 0, 0, 0, 0])?;
                assert_eq!(v.len(), 8);
                assert_eq!(v[7][0], 7);
            }
            rshmem_bootstrap::Result::Ok(t.elapsed() / ITERS)
        },
    );
    let per_op = results.into_iter().map(|r| r.unwrap()).max().unwrap();
    eprintln!("8-rank allgather of 8 bytes: {per_op:?} per call");
    // Generous for loaded CI machines, but catches Nagle-style 40 ms stalls.
    assert!(
        per_op < Duration::from_millis(10),
        "{per_op:?} per allgather"
    );
}

#[test]
fn large_payloads_cross_intact() {
    // Several MiB per rank: exercises partial reads/writes and full socket buffers.
    let big = |rank: usize| -> Vec<u8> {
        (0..(3 << 20) + rank * 4097)
            .map(|i| (i % 251) as u8 ^ rank as u8)
            .collect()
    };
    let results = run_ranks(
        3,
        &[0, 1, 2],
        Some(Duration::from_secs(60)),
        move |rank, b| {
            let b = b?;
            let all = b.allgather(&big(rank))?;
            assert!(
                all.iter().enumerate().all(|(r, v)| *v == big(r)),
                "rank {rank}"
            );
            let got = b.broadcast(2, &if rank == 2 { big(7) } else { Vec::new() })?;
            assert!(got == big(7), "rank {rank}");
            rshmem_bootstrap::Result::Ok(())
        },
    );
    for r in results {
        r.unwrap();
    }
}

#[test]
fn idle_connections_do_not_delay_start_up() {
    // Rank 0 once read hellos one connection at a time, 5 s each: 20 idle connections held
    // the job back by 100 s. Now they must cost (almost) nothing.
    let (listener, uid) = job();
    let size = 3;
    let timeout = Some(Duration::from_secs(30));
    let mut idle: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(uid.addr()).unwrap())
        .collect();
    // And some that start a hello and then stall (a slow sender), with the right magic.
    for _ in 0..5 {
        let mut s = TcpStream::connect(uid.addr()).unwrap();
        s.write_all(b"RSHMEMBS\x01\x00").unwrap();
        idle.push(s);
    }
    let t = Instant::now();
    let handles: Vec<_> = (0..size)
        .map(|rank| {
            let uid = uid.clone();
            let l = (rank == 0).then(|| listener.try_clone().unwrap());
            thread::spawn(move || {
                let b = TcpBootstrap::new(rank, size, &uid, timeout, l)?;
                b.allgather(&[rank as u8])
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), vec![vec![0], vec![1], vec![2]]);
    }
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "25 idle connections delayed start-up by {took:?}"
    );
    drop(idle);
}

#[test]
fn secret_never_crosses_the_network_and_a_squatter_cannot_pass_for_rank_0() {
    use std::io::Read;
    // Another program holds rank 0's address, speaks the protocol's framing, and records what
    // a real rank sends it.
    let (squatter, uid) = job();
    let secret = *uid.secret();
    let leaf = {
        let uid = uid.clone();
        thread::spawn(move || TcpBootstrap::new(1, 2, &uid, Some(Duration::from_secs(10)), None))
    };
    let (mut s, _) = squatter.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut challenge = b"RSHMEMBS".to_vec();
    challenge.extend_from_slice(&3u32.to_le_bytes()); // the protocol version
    challenge.extend_from_slice(&[7u8; 16]);
    s.write_all(&challenge).unwrap();
    let mut hello = [0u8; 76];
    s.read_exact(&mut hello).unwrap();
    assert!(
        !hello.windows(secret.len()).any(|w| w == secret),
        "the hello carries the secret"
    );
    assert_eq!(&hello[..8], b"RSHMEMBS");
    assert_eq!(u64::from_le_bytes(hello[12..20].try_into().unwrap()), 1);
    // "Accepted", with a proof it cannot compute.
    let mut ack = b"RSHMEMBS".to_vec();
    ack.extend_from_slice(&3u32.to_le_bytes());
    ack.extend_from_slice(&0u32.to_le_bytes());
    ack.extend_from_slice(&[0u8; 32]);
    s.write_all(&ack).unwrap();
    match leaf.join().unwrap() {
        Err(Error::Refused(m)) => assert!(m.contains("did not prove"), "{m}"),
        other => panic!("a rank 0 without the secret was believed: {other:?}"),
    }
}

#[test]
fn links_are_logarithmic_and_collectives_agree_at_odd_and_larger_sizes() {
    // Sizes around powers of two exercise the last, partial round of every algorithm.
    for size in [6usize, 13, 33] {
        let all: Vec<usize> = (0..size).collect();
        let results = run_ranks(size, &all, Some(Duration::from_secs(60)), move |rank, b| {
            let b = b?;
            let rounds = (usize::BITS - (size - 1).leading_zeros()) as usize;
            // Rank 0 holds no more connections than any other rank: the rendezvous ones are
            // closed once the links are up.
            assert_eq!(b.connections(), 2 * rounds, "size {size} rank {rank}");
            let got = b.allgather(&payload(rank, 1))?;
            let want: Vec<Vec<u8>> = (0..size).map(|r| payload(r, 1)).collect();
            assert_eq!(got, want, "allgather size {size} rank {rank}");
            let send: Vec<Vec<u8>> = (0..size).map(|d| to_each(rank, d, size)).collect();
            let got = b.alltoall(&send)?;
            let want: Vec<Vec<u8>> = (0..size).map(|s| to_each(s, rank, size)).collect();
            assert_eq!(got, want, "alltoall size {size} rank {rank}");
            for root in [0, size / 2, size - 1] {
                let data = if rank == root {
                    payload(root + 3, 2)
                } else {
                    Vec::new()
                };
                assert_eq!(b.broadcast(root, &data)?, payload(root + 3, 2));
            }
            b.barrier()?;
            rshmem_bootstrap::Result::Ok(())
        });
        for (rank, r) in results.into_iter().enumerate() {
            if let Err(e) = r {
                panic!("size {size} rank {rank}: {e}");
            }
        }
    }
}

#[test]
fn a_failure_reaches_ranks_that_never_talk_to_the_failed_rank() {
    // 9 ranks, links to rank ± 1, 2, 4, 8 (mod 9): rank 5 leaves after joining; rank 5 + 3 = 8
    // and 5 - 3 = 2 have no link to it and can only learn of the loss through the abort that
    // its partners pass along the links.
    let size = 9;
    let all: Vec<usize> = (0..size).collect();
    let results = run_ranks(size, &all, Some(Duration::from_secs(20)), |rank, b| {
        let b = b?;
        if rank == 5 {
            drop(b);
            return Ok(());
        }
        b.barrier()
    });
    for (rank, r) in results.iter().enumerate() {
        if rank == 5 {
            continue;
        }
        assert!(
            matches!(r, Err(Error::PeerLost { rank: 5, .. })),
            "rank {rank}: {r:?}"
        );
    }
}
