//! The one-PE bootstrap: every collective is local.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::Bootstrap;

/// The bootstrap of a job with a single PE (a program started without a launcher, or
/// `rshmemrun -n 1`). Rank 0 of 1; every collective returns immediately.
#[derive(Debug, Default, Clone, Copy)]
pub struct SingletonBootstrap {
    _private: (),
}

impl SingletonBootstrap {
    /// The singleton bootstrap.
    pub fn new() -> Self {
        SingletonBootstrap { _private: () }
    }
}

impl Bootstrap for SingletonBootstrap {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }

    fn alltoall(&self, to_each: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        if to_each.len() != 1 {
            return Err(Error::InvalidArgument(format!(
                "alltoall needs one buffer per rank (1), got {}",
                to_each.len()
            )));
        }
        Ok(to_each.to_vec())
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root != 0 {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} is out of range for a job of 1 rank"
            )));
        }
        Ok(data.to_vec())
    }

    fn timeout(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trivial_collectives() {
        let b = SingletonBootstrap::new();
        assert_eq!((b.rank(), b.size()), (0, 1));
        assert_eq!(b.allgather(b"abc").unwrap(), vec![b"abc".to_vec()]);
        assert_eq!(b.alltoall(&[b"x".to_vec()]).unwrap(), vec![b"x".to_vec()]);
        b.barrier().unwrap();
        assert_eq!(b.broadcast(0, b"hi").unwrap(), b"hi".to_vec());
        assert!(matches!(b.alltoall(&[]), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            b.alltoall(&[vec![], vec![]]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.broadcast(1, b""),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(b.timeout(), None);
    }
}
