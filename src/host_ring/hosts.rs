//! Where the ranks of a job run: the host of every rank and the ranks of every host, from the
//! launcher's labels or blocks of consecutive ranks.

use std::collections::HashMap;
use std::hash::Hash;

use super::HostRingError;
use crate::Rank;

/// Ranks of a job and the host each one runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// Host index of every rank. Hosts are numbered in the order of their lowest rank.
    host_of: Vec<u16>,
    /// Ranks of every host, ascending.
    ranks: Vec<Vec<Rank>>,
}

impl Hosts {
    /// From a host label per rank (`labels[r]`; equal labels = one host: a MAC address, a host
    /// name, an index).
    pub fn from_labels<T: Eq + Hash>(labels: &[T]) -> Result<Hosts, HostRingError> {
        if labels.is_empty() || labels.len() >= usize::from(u16::MAX) {
            return Err(HostRingError::Topology(format!(
                "a job of {} ranks (1 to 65534)",
                labels.len()
            )));
        }
        let mut index: HashMap<&T, u16> = HashMap::new();
        let mut ranks: Vec<Vec<Rank>> = Vec::new();
        let mut host_of = Vec::with_capacity(labels.len());
        for (r, label) in labels.iter().enumerate() {
            let next = ranks.len() as u16;
            let h = *index.entry(label).or_insert(next);
            if h == next {
                ranks.push(Vec::new());
            }
            ranks[usize::from(h)].push(Rank::new(r as u16));
            host_of.push(h);
        }
        Ok(Hosts { host_of, ranks })
    }

    /// `size` ranks in blocks of `per_host` consecutive ranks (the last host may have fewer).
    pub fn blocks(size: u16, per_host: u16) -> Result<Hosts, HostRingError> {
        if per_host == 0 {
            return Err(HostRingError::Topology("0 ranks per host".into()));
        }
        let labels: Vec<u16> = (0..size).map(|r| r / per_host).collect();
        Hosts::from_labels(&labels)
    }

    /// Ranks in the job.
    pub fn size(&self) -> u16 {
        self.host_of.len() as u16
    }

    /// Number of hosts (members of the network group).
    pub fn count(&self) -> u16 {
        self.ranks.len() as u16
    }

    /// Host of rank `r` (its rank in the network group), `None` outside the job.
    pub fn host(&self, r: Rank) -> Option<u16> {
        self.host_of.get(r.index()).copied()
    }

    /// Ranks on host `h`, ascending.
    pub fn ranks_on(&self, h: u16) -> &[Rank] {
        self.ranks.get(usize::from(h)).map_or(&[], Vec::as_slice)
    }

    /// Position of rank `r` among the ranks of its host (0: the owner).
    pub fn local_index(&self, r: Rank) -> Option<usize> {
        let h = self.host(r)?;
        self.ranks_on(h).iter().position(|&x| x == r)
    }

    /// Whether any host runs more than one rank.
    pub fn shares_hosts(&self) -> bool {
        self.ranks.iter().any(|r| r.len() > 1)
    }
}
