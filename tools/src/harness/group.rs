//! Members of a group as threads on a test-bed: one thread per host, each in the host's
//! network namespace before it opens its link (a socket stays in the namespace it was created
//! in), so one process holds every member and one clock ([`std::time::Instant`]) times them
//! all. A scenario builds a fresh test-bed ([`bed`]), starts its members ([`spawn_members`]),
//! and collects what each saw ([`join_all`]).

use std::time::Duration;

use ethbcast::{Group, GroupError, GroupOptions};

use crate::netns;
use crate::testbed::{Testbed, TestbedConfig, TestbedError};

/// A fresh test-bed of `hosts` hosts for a scenario, with `loss` percent loss at the switch.
pub fn bed(prefix: &str, hosts: usize, loss: f64) -> Result<Testbed, TestbedError> {
    let mut cfg = TestbedConfig::new(hosts);
    cfg.prefix = prefix.to_string();
    if loss > 0.0 {
        cfg.loss_pct = Some(loss);
    }
    Testbed::up(&cfg)
}

/// Message `i` of a scenario: 20 000 bytes that differ from message to message.
pub fn msg(i: usize) -> Vec<u8> {
    (0..20_000).map(|k| (k as u8) ^ (i as u8)).collect()
}

/// Milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A member thread of a scenario.
pub type Member<T> = std::thread::JoinHandle<Result<T, GroupError>>;

/// Starts one member thread per host of `hosts`, each running `f` with a [`Group`] of those
/// hosts over the default link.
pub fn spawn_members<T: Send + 'static>(
    bed: &Testbed,
    hosts: std::ops::Range<usize>,
    f: impl Fn(Group) -> Result<T, GroupError> + Send + Sync + Clone + 'static,
    opts: GroupOptions,
) -> Result<Vec<Member<T>>, TestbedError> {
    let macs: Vec<[u8; 6]> = bed.hosts()[hosts.clone()].iter().map(|h| h.mac).collect();
    bed.hosts()[hosts]
        .iter()
        .map(|h| {
            let (macs, f, opts) = (macs.clone(), f.clone(), opts.clone());
            netns::spawn_in(&h.netns, move || {
                let link = ethbcast::open_link(Default::default(), "eth0", Default::default())?;
                f(Group::from_link(link, macs, opts)?)
            })
            .map_err(|e| TestbedError::Io {
                context: "spawn member".into(),
                source: e,
            })
        })
        .collect()
}

/// Joins the member threads, in rank order.
pub fn join_all<T>(handles: Vec<Member<T>>) -> Vec<Result<T, String>> {
    handles
        .into_iter()
        .map(|h| match h.join() {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("member thread panicked".into()),
        })
        .collect()
}
