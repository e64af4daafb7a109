//! Running code inside a named network namespace (`ip netns` style, `/run/netns/NAME`).
//!
//! Why threads: a network namespace is a per-thread attribute on Linux, and
//! every socket remembers the namespace it was created in. So a test can drive
//! several simulated hosts from one process by giving each host its own thread
//! that first `setns(2)`s into that host's namespace; sockets opened on that
//! thread (AF_PACKET, netlink, UDP...) then live in the host's namespace for
//! their whole life, even if handed to other threads. Child processes spawned
//! from such a thread inherit its namespace too, which the test-bed uses to run
//! `nft`/`tc` cheaply without `ip netns exec` (that one also remounts `/sys`).
//!
//! Only the network namespace is switched: the mount namespace is not, so
//! `/sys/class/net` and `/proc/net` still show the original namespace (use
//! netlink or sockets, or [`spawn_process_in`], when you need those).
#![deny(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;

use nix::sched::{setns, CloneFlags};

/// Directory where `ip netns add` pins named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Path of the pinned namespace `name` (`/run/netns/NAME`).
///
/// Rejects names that are empty or could escape the directory.
pub fn netns_path(name: &str) -> io::Result<PathBuf> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid network namespace name {name:?}"),
        ));
    }
    Ok(PathBuf::from(NETNS_RUN_DIR).join(name))
}

fn open_netns(name: &str) -> io::Result<File> {
    let path = netns_path(name)?;
    File::open(&path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot open network namespace {name:?} ({}): {e} (is the test-bed up? `ip netns list`)",
                path.display()
            ),
        )
    })
}

fn setns_file(name: &str, file: &File) -> io::Result<()> {
    setns(file, CloneFlags::CLONE_NEWNET).map_err(|errno| {
        let e = io::Error::from(errno);
        let hint = if e.kind() == io::ErrorKind::PermissionDenied {
            " (run as root: CAP_SYS_ADMIN is needed)"
        } else {
            ""
        };
        io::Error::new(
            e.kind(),
            format!("setns into network namespace {name:?} failed: {e}{hint}"),
        )
    })
}

/// Moves the *current thread* into the network namespace `netns`.
///
/// There is no way back except entering another namespace, so prefer
/// [`spawn_in`] / [`run_in`] unless the thread is dedicated to that namespace.
pub fn enter(netns: &str) -> io::Result<()> {
    let file = open_netns(netns)?;
    setns_file(netns, &file)
}

/// Spawns a thread that enters `netns` and then runs `f`.
///
/// Returns only once the thread is inside the namespace, so a failure to open
/// or enter it is reported here as an error, and `f` never runs in the wrong
/// namespace. Sockets created by `f` stay in `netns`.
pub fn spawn_in<F, T>(netns: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let file = open_netns(netns)?;
    let name = netns.to_owned();
    let (tx, rx) = mpsc::channel::<io::Result<()>>();
    let handle = std::thread::Builder::new()
        .name(format!("netns-{netns}"))
        .spawn(move || {
            let entered = setns_file(&name, &file);
            drop(file);
            let ok = entered.is_ok();
            // The receiver only disappears if spawn_in itself unwound.
            let _ = tx.send(entered);
            if !ok {
                // Never run `f` outside its namespace. The caller already got
                // the error and joins this thread; `resume_unwind` ends it
                // without a value and without invoking the panic hook (no noise).
                std::panic::resume_unwind(Box::new(()));
            }
            f()
        })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(io::Error::other(format!(
                "thread for network namespace {netns:?} died before entering it"
            )))
        }
    }
}

/// Runs `f` on a thread inside `netns` and waits for its result.
///
/// A panic in `f` is propagated to the caller.
pub fn run_in<F, T>(netns: &str, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let handle = spawn_in(netns, f)?;
    match handle.join() {
        Ok(v) => Ok(v),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A [`Command`] for `ip netns exec NETNS program`: add arguments, set up
/// stdio as needed, then spawn or get its output.
///
/// Unlike [`spawn_in`] the child also gets a `/sys` of that namespace and
/// `/etc/netns/NETNS` applied, exactly as `ip netns exec` does.
pub fn command_in(netns: &str, program: &str) -> io::Result<Command> {
    netns_path(netns)?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, program]);
    Ok(cmd)
}

/// Starts `program args...` inside `netns` as `ip netns exec NETNS program args...`
/// (stdio inherited; use [`command_in`] to capture it). The caller owns the
/// [`Child`] and must wait for it or kill it (by its pid).
pub fn spawn_process_in<I, S>(netns: &str, program: &str, args: I) -> io::Result<Child>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    command_in(netns, program)?.args(args).spawn().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(e.kind(), "ip not found: apt-get install iproute2")
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        for bad in ["", ".", "..", "a/b", "../etc"] {
            assert!(netns_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            netns_path("ebc-h0").unwrap(),
            PathBuf::from("/run/netns/ebc-h0")
        );
    }

    #[test]
    fn missing_namespace_is_an_error_not_a_panic() {
        let err = spawn_in("ethbcast-no-such-netns-xyz", || 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("ethbcast-no-such-netns-xyz"));
        assert!(enter("ethbcast-no-such-netns-xyz").is_err());
    }
}
