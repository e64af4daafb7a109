//! Unit tests of the group API: keys, hostfiles and options.

use super::*;
use crate::member::{tree_children, tree_parent};

/// A program that takes the default options has made no choice about keys: it must not
/// end up in a group that any host of the segment can join and broadcast into. Opening
/// fails before any frame is sent, and the error says how to choose.
#[test]
fn default_options_refuse_a_group_without_a_key() {
    let opts = GroupOptions::default();
    let e = Group::open(
        "ebc-none0",
        Membership::Discover { expected: 2 },
        opts.clone(),
    )
    .err()
    .unwrap_or_else(|| panic!("a keyless group opened by default"));
    assert!(matches!(e, GroupError::NoKey), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("GroupOptions::key") && shown.contains("insecure"),
        "{shown}"
    );
    let host = HostOptions {
        group: opts,
        ..HostOptions::default()
    };
    let e = HostGroup::open("ebc-none0", host)
        .err()
        .unwrap_or_else(|| panic!("a keyless host group"));
    assert!(matches!(e, HostError::Group(GroupError::NoKey)), "{e}");
    // Chosen explicitly, keyless goes on to the link (which does not exist here).
    let e = Group::open(
        "ebc-none0",
        Membership::Discover { expected: 2 },
        GroupOptions::insecure(),
    )
    .err()
    .unwrap_or_else(|| panic!("no such interface"));
    assert!(matches!(e, GroupError::Link(_)), "{e}");
    let keyed = GroupOptions {
        key: Some([7; 32].into()),
        ..GroupOptions::default()
    };
    let e = Group::open("ebc-none0", Membership::Discover { expected: 2 }, keyed)
        .err()
        .unwrap_or_else(|| panic!("no such interface"));
    assert!(matches!(e, GroupError::Link(_)), "{e}");
}

/// Performs the attack: the dictionary attacker's cheap derivation (the unsalted BLAKE3
/// key derivation of each guess) must not reach the key even with the right passphrase;
/// the key is Argon2id of the passphrase with the group's salt, and differs per group.
#[test]
fn passphrases_are_stretched_with_a_salt_of_the_group() {
    let key = key_from_passphrase("correct horse", 0xEB_CA57).unwrap();
    assert_ne!(
        *key,
        blake3::derive_key("ethbcast 2026-11 group key", b"correct horse"),
        "one cheap hash per guess finds the key"
    );
    assert_ne!(
        key,
        key_from_passphrase("correct horse", 0xEB_CA58).unwrap()
    );
    assert_eq!(
        key,
        key_from_passphrase("correct horse", 0xEB_CA57).unwrap()
    );
    let salt = blake3::derive_key(
        "ethbcast 2026-11 passphrase salt",
        &0xEB_CA57u32.to_be_bytes(),
    );
    let mut expect = [0u8; 32];
    argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(19 * 1024, 2, 1, Some(32)).unwrap(),
    )
    .hash_password_into(b"correct horse", &salt[..16], &mut expect)
    .unwrap();
    assert_eq!(key, expect.into());
}

#[test]
fn hostfiles_accept_names_comments_and_reject_duplicates() {
    let peers =
        parse_hostfile("# cluster\nnode0 02:00:00:00:00:01\n\n02:00:00:00:00:02 # second\n")
            .unwrap();
    assert_eq!(
        peers,
        vec![
            HostEntry {
                name: Some("node0".into()),
                mac: MacAddr([2, 0, 0, 0, 0, 1])
            },
            HostEntry {
                name: None,
                mac: MacAddr([2, 0, 0, 0, 0, 2])
            }
        ]
    );
    assert_eq!(peers[0].label(), "node0");
    assert_eq!(peers[1].label(), "02:00:00:00:00:02");
    // The name may follow the MAC too.
    let after = parse_hostfile("02:00:00:00:00:03 node3\n").unwrap();
    assert_eq!(after[0].name.as_deref(), Some("node3"));
    assert!(parse_hostfile("02:00:00:00:00:01\n02:00:00:00:00:01\n").is_err());
    assert!(parse_hostfile("node0\n").is_err());
    assert!(parse_hostfile("# nothing\n").is_err());
}

#[test]
fn launcher_environments_give_rank_and_size() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(a, _)| *a == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        rank_size_from_env(env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8")])),
        Some((Rank::new(3), 8))
    );
    assert_eq!(
        rank_size_from_env(env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2")
        ])),
        Some((Rank::new(1), 2))
    );
    assert_eq!(
        rank_size_from_env(env(&[
            ("ETHBCAST_RANK", "0"),
            ("ETHBCAST_SIZE", "4"),
            ("PMI_RANK", "2"),
            ("PMI_SIZE", "4")
        ])),
        Some((Rank::new(0), 4))
    );
    assert_eq!(
        rank_size_from_env(env(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")])),
        None,
        "rank must be < size"
    );
    assert_eq!(rank_size_from_env(env(&[])), None);
}

#[test]
fn the_binomial_tree_reaches_every_member_exactly_once() {
    for n in 1u16..=33 {
        for root in 0..n {
            let mut reached = vec![0u32; usize::from(n)];
            reached[usize::from(root)] += 1;
            for me in 0..n {
                for c in tree_children(Rank::new(me), Rank::new(root), n) {
                    reached[c.index()] += 1;
                    assert_eq!(
                        tree_parent(c, Rank::new(root), n),
                        Some(Rank::new(me)),
                        "n={n} root={root}"
                    );
                }
            }
            assert!(
                reached.iter().all(|&k| k == 1),
                "n={n} root={root}: {reached:?}"
            );
            assert_eq!(tree_parent(Rank::new(root), Rank::new(root), n), None);
        }
    }
    assert_eq!(
        tree_children(Rank::new(0), Rank::new(0), 8),
        vec![Rank::new(4), Rank::new(2), Rank::new(1)]
    );
}

#[test]
fn algorithms_parse_by_their_paper_names_too() {
    assert_eq!("ppbcast".parse::<Algorithm>(), Ok(Algorithm::PushPull));
    assert_eq!("sbcast".parse::<Algorithm>(), Ok(Algorithm::Simple));
    assert_eq!("mpich".parse::<Algorithm>(), Ok(Algorithm::Tree));
    assert!("x".parse::<Algorithm>().is_err());
}

/// A join timeout's explanation names who failed authentication (how many frames), another
/// coordinator on a coordinator's group, and other sessions' senders.
#[test]
fn a_join_timeout_names_what_it_overheard() {
    let a = crate::MacAddr([2, 0, 0, 0, 0, 1]);
    let rival = crate::MacAddr([2, 0, 0, 0, 0, 9]);
    let seen = super::JoinSeen {
        unauthenticated: vec![(a, 17)],
        coordinators: vec![rival],
        ..Default::default()
    };
    let coordinator = seen.explain(true);
    assert!(
        coordinator.contains("17 from 02:00:00:00:00:01") && coordinator.contains("different key"),
        "{coordinator}"
    );
    assert!(
        coordinator.contains("another coordinator") && coordinator.contains("02:00:00:00:00:09")
    );
    // To a member, coordinators are its senders, not rivals.
    assert!(!seen.explain(false).contains("another coordinator"));
    assert_eq!(super::JoinSeen::default().explain(true), "");
}
