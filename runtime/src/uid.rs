//! Making a job's unique id on the rank that will listen for the others (rank 0), for programs
//! that distribute it themselves (the C API's `rshmem_get_uniqueid`, Python's
//! `rshmem.get_unique_id()`, a framework's own store).

use std::net::{IpAddr, Ipv4Addr, TcpListener, ToSocketAddrs};

use rshmem_bootstrap::UniqueId;

use crate::error::{Error, Result};

/// **Local**, allowed before init. A fresh [`UniqueId`] for a job whose rank 0 is this process:
/// the address is `RSHMEM_TCP_ADDR` when set, else this host name's first non-loopback IPv4
/// address, else loopback; the port is one that is free now; the secret is fresh and random.
/// Pass its text (`to_string()`) to every rank, which give it to [`crate::Builder::unique_id`]
/// with their rank and the job size.
pub fn new_unique_id() -> Result<UniqueId> {
    let call = "new_unique_id";
    let ip: IpAddr = match std::env::var("RSHMEM_TCP_ADDR") {
        Ok(a) => a.trim().parse().map_err(|_| {
            Error::invalid(call, format!("RSHMEM_TCP_ADDR={a:?} is not an IP address"))
        })?,
        Err(_) => host_ipv4().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    };
    let port = TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| {
            Error::os(
                call,
                format!("finding a free port on {ip} for the rendezvous"),
                e,
            )
        })?
        .port();
    let addr = match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    Ok(UniqueId::new(addr)?)
}

/// This host name's first non-loopback IPv4 address.
fn host_ipv4() -> Option<IpAddr> {
    let name = nix::unistd::gethostname().ok()?.into_string().ok()?;
    (name.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .find(|s| s.is_ipv4() && !s.ip().is_loopback())
        .map(|s| s.ip())
}

#[cfg(test)]
mod tests {
    #[test]
    fn new_unique_id_round_trips_through_its_text() {
        let id = super::new_unique_id().expect("a unique id");
        let back: rshmem_bootstrap::UniqueId = id.to_string().parse().expect("parses back");
        assert_eq!(back, id);
        assert!(id.addr().rsplit_once(':').is_some_and(|(_, p)| p != "0"));
    }
}
