//! Unit tests of host groups: placements from the environment, segment names, a job on one
//! host.

use std::time::Duration;

use super::segment::{net_namespace, segment_path, segment_tag};
use super::{placement_from_env, HostError, HostGroup, HostOptions, Placement, JOB_TOKEN_VAR};
use crate::group::{GroupError, GroupOptions};
use crate::host_ring::Hosts;
use crate::Rank;

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        pairs
            .iter()
            .find(|(a, _)| *a == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn launchers_local_ranks_give_blocks_of_ranks_per_host() {
    let (rank, hosts) = placement_from_env(env(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(rank, Rank::new(5));
    assert_eq!(hosts.count(), 2);
    assert_eq!(hosts.ranks_on(1), &[4, 5, 6, 7].map(Rank::new));
    let (_, hosts) = placement_from_env(env(&[
        ("PMI_RANK", "2"),
        ("PMI_SIZE", "6"),
        ("MPI_LOCALRANKID", "0"),
        ("MPI_LOCALNRANKS", "2"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(hosts.count(), 3);
    // One rank per host, or no local information: the plain path.
    for pairs in [
        &[
            ("ETHBCAST_RANK", "1"),
            ("ETHBCAST_SIZE", "4"),
            ("ETHBCAST_LOCAL_RANK", "0"),
            ("ETHBCAST_LOCAL_SIZE", "1"),
        ][..],
        &[("ETHBCAST_RANK", "1"), ("ETHBCAST_SIZE", "4")][..],
        &[][..],
    ] {
        let pairs: &'static [(&str, &str)] = pairs;
        assert!(placement_from_env(env(pairs)).unwrap().is_none());
    }
}

#[test]
fn placements_the_environment_cannot_describe_are_refused() {
    for pairs in [
        // Round-robin: rank 1 is local rank 0.
        &[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS_PER_NODE", "4"),
        ][..],
        // Uneven: 6 ranks, 4 per host.
        &[
            ("ETHBCAST_RANK", "1"),
            ("ETHBCAST_SIZE", "6"),
            ("ETHBCAST_LOCAL_RANK", "1"),
            ("ETHBCAST_LOCAL_SIZE", "4"),
        ][..],
    ] {
        let pairs: &'static [(&str, &str)] = pairs;
        let e = placement_from_env(env(pairs)).unwrap_err();
        assert!(e.to_string().contains("ethbcast_open_hosts"), "{e}");
    }
}

#[test]
fn segments_are_named_per_job_and_host() {
    let hosts = Hosts::blocks(8, 4).unwrap();
    let a = segment_path(0x1234, &hosts, 0, None);
    let b = segment_path(0x1234, &hosts, 1, None);
    let c = segment_path(0x1235, &hosts, 1, None);
    assert_ne!(a, b);
    assert_ne!(b, c);
    let ns = net_namespace();
    assert_ne!(ns, 0, "/proc/self/ns/net is readable");
    assert!(
        b.to_string_lossy()
            .ends_with(&format!("ethbcast-00001234-8-4-{ns}")),
        "{b:?}"
    );
}

/// With a launcher's token or a group key, another local user who knows
/// every public number of the job (group id, size, ranks, network namespace) cannot name
/// its segment in advance; every rank of the job names it alike.
#[test]
fn segment_names_need_the_jobs_token_or_key() {
    let hosts = Hosts::blocks(8, 4).unwrap();
    let token = "3f1c9a7e55d04b2a9c8e61f0a2b7d4e9";
    let key = [7u8; 32];
    let public = segment_path(0x1234, &hosts, 1, None);
    let named = |token: Option<&str>, key: Option<&[u8; 32]>| {
        let tag = segment_tag(token, key).unwrap();
        segment_path(0x1234, &hosts, 1, tag.as_deref())
    };
    // The same inputs on every rank give the same name.
    assert_eq!(named(Some(token), None), named(Some(token), None));
    assert_eq!(named(None, Some(&key)), named(None, Some(&key)));
    // A token or a key changes the name, and so does another token or key.
    let with_token = named(Some(token), None);
    let with_key = named(None, Some(&key));
    let both = named(Some(token), Some(&key));
    for p in [&with_token, &with_key, &both] {
        assert_ne!(p, &public);
        assert!(p.to_string_lossy().starts_with(&*public.to_string_lossy()));
        assert!(!p.to_string_lossy().contains(token), "{p:?}");
    }
    assert_ne!(with_token, with_key);
    assert_ne!(with_token, both);
    assert_ne!(
        with_token,
        named(Some("3f1c9a7e55d04b2a9c8e61f0a2b7d4e8"), None)
    );
    assert_ne!(with_key, named(None, Some(&[8u8; 32])));
    // 128 bits of tag.
    let name = with_token
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let tag = name.rsplit('-').next().unwrap();
    assert_eq!(tag.len(), 32);
    assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
    // Neither: the public name. An empty token counts as none; a short one is refused.
    assert_eq!(named(None, None), public);
    assert_eq!(named(Some(""), None), public);
    let e = segment_tag(Some("1234"), None).unwrap_err();
    assert!(e.to_string().contains(JOB_TOKEN_VAR), "{e}");
}

/// Every rank of a job on this one host: no link is opened, the ranks meet in the host's
/// ring alone. Each rank in turn is root; a receiver with a buffer of another length gets
/// a length error and the job goes on.
#[test]
fn ranks_of_one_host_broadcast_and_meet_through_the_ring() {
    const N: u16 = 3;
    let group_id = 0x4700_0000 | (std::process::id() & 0xFFFF);
    let threads: Vec<_> = (0..N)
        .map(|rank| {
            std::thread::spawn(move || {
                let opts = HostOptions {
                    group: GroupOptions {
                        group_id,
                        timeout: Duration::from_secs(20),
                        ..GroupOptions::insecure()
                    },
                    placement: Placement::Hosts {
                        rank: Rank::new(rank),
                        hosts: Hosts::blocks(N, N).unwrap(),
                    },
                    ..HostOptions::default()
                };
                let mut g = HostGroup::open("no-such-interface", opts).unwrap();
                assert_eq!((g.rank(), g.size()), (Rank::new(rank), N));
                assert!(!g.on_network());
                assert!(g.network().is_none());
                for root in 0..N {
                    let mut buf = vec![rank as u8; 100 + usize::from(root)];
                    g.bcast(Rank::new(root), &mut buf).unwrap();
                    assert_eq!(buf, vec![root as u8; 100 + usize::from(root)]);
                    g.barrier().unwrap();
                }
                let mut short = vec![0u8; if rank == 1 { 7 } else { 8 }];
                match g.bcast(Rank::new(0), &mut short) {
                    Err(HostError::Length {
                        root,
                        got: 8,
                        want: 7,
                    }) if root == Rank::new(0) => assert_eq!(rank, 1),
                    r => {
                        r.unwrap();
                        assert_ne!(rank, 1);
                    }
                }
                assert!(matches!(
                    g.bcast(Rank::new(N), &mut short),
                    Err(HostError::Group(GroupError::BadRank { rank, size: N })) if rank == Rank::new(N)
                ));
                g.barrier().unwrap();
                g.flush().unwrap();
                g.leave_host().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
