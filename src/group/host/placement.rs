//! Where a job's ranks run ([`Placement`]), and what the usual launchers' environment says of
//! it: blocks of consecutive ranks per host, from their local rank and size.

use crate::group::rank_size_from_env;
use crate::host_ring::Hosts;
use crate::Rank;

use super::HostError;

/// Where the ranks of the job run.
#[derive(Debug, Clone, Default)]
pub enum Placement {
    /// From the membership alone; with [`Membership::Env`](crate::Membership::Env), the
    /// launcher's local rank and size ([`placement_from_env`]) tell when ranks share hosts.
    #[default]
    Auto,
    /// One rank per host: every rank is a member of the network group.
    OnePerHost,
    /// This process is rank `rank` of a job whose ranks run on hosts as `hosts` says.
    Hosts {
        /// This process's rank.
        rank: Rank,
        /// The host of every rank.
        hosts: Hosts,
    },
}

/// Pairs of (local rank, local size) variables of the usual launchers, first match wins.
const LOCAL_VARS: [(&str, &str); 4] = [
    ("ETHBCAST_LOCAL_RANK", "ETHBCAST_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
];

/// Several ranks per host from the launcher's environment: rank and size as
/// [`rank_size_from_env`] finds them, local rank and size from `ETHBCAST_LOCAL_RANK`/
/// `_SIZE`, Open MPI's `OMPI_COMM_WORLD_LOCAL_RANK`/`_SIZE`, MPICH's `MPI_LOCALRANKID`/
/// `MPI_LOCALNRANKS` or Slurm's `SLURM_LOCALID`/`SLURM_NTASKS_PER_NODE`. `Ok(None)`: one rank
/// per host (no local size above 1). The environment cannot say which ranks share a host, so
/// it must be blocks of consecutive ranks, the same number on every host (Open MPI's and
/// MPICH's default placement); anything else is an error that says to pass the placement
/// ([`Placement::Hosts`]; `ethbcast_open_hosts` in C).
pub fn placement_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<(Rank, Hosts)>, HostError> {
    let Some((rank, size)) = rank_size_from_env(&get) else {
        return Ok(None);
    };
    let local = LOCAL_VARS.iter().find_map(|(r, s)| {
        let lr: u16 = get(r)?.trim().parse().ok()?;
        let ls: u16 = get(s)?.trim().parse().ok()?;
        Some((*r, lr, ls))
    });
    let Some((var, local_rank, per_host)) = local else {
        return Ok(None);
    };
    if per_host <= 1 {
        return Ok(None);
    }
    if local_rank >= per_host || size % per_host != 0 || rank.get() % per_host != local_rank {
        return Err(HostError::Placement(format!(
            "rank {rank} of {size} is local rank {local_rank} of {per_host} ({var}): the environment describes hosts only as blocks of {per_host} consecutive ranks on every host; for other placements open with the host of every rank (ethbcast_open_hosts)"
        )));
    }
    let hosts = Hosts::blocks(size, per_host)?;
    Ok(Some((rank, hosts)))
}
