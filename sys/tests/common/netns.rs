//! A private network namespace with a veth pair, for tests and measurements that send real
//! frames without touching the host's networks.
//!
//! Shared by `sys/tests`, the root crate's `tests/link_backends.rs` and the pingpong example
//! (included with `#[path]`), so the namespace discipline lives in one place: unique names
//! (`ebsys-<pid>-<tag>`), both veth ends inside the namespace, and teardown in `Drop` even when
//! a test panics. If namespaces cannot be created (no root, no `ip`), the test is skipped with
//! a loud line on stderr, unless `ETHBCAST_REQUIRE_NETNS=1` says that must fail.
#![allow(dead_code)]

use std::fs::File;
use std::process::Command;

/// Names of the two veth ends inside the namespace.
pub const END_A: &str = "eb0";
/// The other end.
pub const END_B: &str = "eb1";

/// A network namespace holding the veth pair [`END_A`] <-> [`END_B`]; deleted on drop.
pub struct NetnsPair {
    /// Namespace name (under /run/netns).
    pub name: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetnsPair {
    /// Creates namespace `ebsys-<pid>-<tag>` with the veth pair up.
    pub fn create(tag: &str) -> Result<Self, String> {
        let name = format!("ebsys-{}-{tag}", std::process::id());
        ip(&["netns", "add", &name])?;
        // From here on Drop cleans up.
        let ns = NetnsPair { name };
        let n = ns.name.as_str();
        ip(&[
            "-n", n, "link", "add", END_A, "type", "veth", "peer", "name", END_B,
        ])?;
        for dev in [END_A, END_B, "lo"] {
            ip(&["-n", n, "link", "set", dev, "up"])?;
        }
        Ok(ns)
    }

    /// Creates the namespace, or returns `None` after printing a loud SKIPPED line, or panics
    /// if `ETHBCAST_REQUIRE_NETNS=1`.
    pub fn create_or_skip(tag: &str) -> Option<Self> {
        match Self::create(tag) {
            Ok(ns) => Some(ns),
            Err(e) => {
                if std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() == Ok("1") {
                    panic!(
                        "ETHBCAST_REQUIRE_NETNS=1 but a network namespace cannot be created: {e}"
                    );
                }
                // Straight to fd 2 (not eprintln!), so the test harness's capture cannot hide it.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: {tag}: cannot create a network namespace ({e}); run as root with iproute2 to run this test"
                );
                None
            }
        }
    }

    /// Moves the calling thread into the namespace (sockets it creates afterwards stay there).
    pub fn enter(&self) -> Result<(), String> {
        let f = File::open(format!("/run/netns/{}", self.name))
            .map_err(|e| format!("open /run/netns/{}: {e}", self.name))?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns into {}: {e}", self.name))
    }

    /// Runs `f` on a new thread inside the namespace and returns its result (a panic in `f`
    /// propagates, after which `Drop` still tears the namespace down).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter().expect("entering the test namespace");
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!(
                "warning: could not delete network namespace {}: {e}",
                self.name
            );
        }
    }
}
