//! Waiting for a socket: spin, block in `ppoll(2)`, or spin a little and then block.
//!
//! Why three ways: a blocking wait costs a sleep and a wake-up (several microseconds, more on a
//! loaded machine), which dominates the round trip of a small frame; spinning avoids it but
//! burns a core, which is wrong on a shared machine. Spinning briefly and then blocking keeps
//! most of the latency win when traffic is dense and costs little when it is not.
//!
//! `ppoll` rather than `poll` because its timeout has nanosecond resolution: a 200 µs wait must
//! not become 0 ms (a busy loop) or 1 ms.

use crate::{Error, Result};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Busy-poll the readiness check until it succeeds or the time is up.
    Spin,
    /// Block in `ppoll(2)`.
    Block,
    /// Spin for up to `spin`, yielding the CPU between checks (`sched_yield`), then block.
    Adaptive {
        /// How long to spin before blocking.
        spin: Duration,
    },
    /// Sleep `interval` between checks, never block on the socket: frames pile up in the
    /// receive queue meanwhile and are taken as one batch. For bulk receivers on hosts with
    /// more busy processes than cores, where a wake-up per frame (blocking) or a yield per check
    /// (spinning) costs more than the frames themselves; adds up to `interval` of latency, and
    /// a wait ends up to `interval` after its timeout (a deadline between two looks is noticed
    /// at the next).
    Doze {
        /// Time between checks.
        interval: Duration,
    },
}

impl Strategy {
    /// Spin budget of the default adaptive strategy.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
    /// Spin budget of a patient wait: longer than the members of a small group take to reach a
    /// collective call, so that the frame that ends the wait finds the waiter running (as MPI
    /// ranks wait in their own collectives) and a wake-up is left for long waits.
    pub const PATIENT_SPIN: Duration = Duration::from_millis(2);
    /// Sleep between checks of the doze strategy: a millisecond, about 85 full frames at
    /// 1 Gbit/s, taken as one batch. Receivers' CPU per GiB is mostly wake-ups below that (a
    /// raw sink's fell to a third from 200 µs), and a ring of a few thousand frames holds tens
    /// of milliseconds.
    pub const DEFAULT_DOZE: Duration = Duration::from_millis(1);
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy::Adaptive {
            spin: Self::DEFAULT_SPIN,
        }
    }
}

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Something to receive.
    Read,
    /// Room to send.
    Write,
}

/// Blocks in `ppoll(2)` until `fd` is ready for `interest` or `timeout` passes (`None`: no
/// limit). Returns whether it is ready; an interrupted wait counts as not ready. A pending
/// socket error (e.g. the interface went away) is returned as an error.
pub fn poll_fd(fd: BorrowedFd<'_>, interest: Interest, timeout: Option<Duration>) -> Result<bool> {
    let events = match interest {
        Interest::Read => libc::POLLIN,
        Interest::Write => libc::POLLOUT,
    };
    let mut pfd = [pollfd(fd, events)];
    if !ppoll(&mut pfd, timeout)? {
        return Ok(false);
    }
    if pfd[0].revents & events != 0 {
        return Ok(true);
    }
    Err(socket_error(fd))
}

/// Blocks in `ppoll(2)` until one of `fds` is readable or hung up (a pipe whose write end was
/// closed), or `timeout` passes (`None`: no limit). Returns whether one is; an interrupted wait
/// counts as not ready. A descriptor in error (a socket whose interface went away) is returned
/// as its error, so that a caller waiting in a loop pauses instead of spinning on it.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds.iter().map(|&fd| pollfd(fd, libc::POLLIN)).collect();
    if !ppoll(&mut pfds, timeout)? {
        return Ok(false);
    }
    let failed = libc::POLLERR | libc::POLLNVAL;
    if let Some((fd, _)) = fds.iter().zip(&pfds).find(|(_, p)| p.revents & failed != 0) {
        return Err(socket_error(*fd));
    }
    Ok(pfds
        .iter()
        .any(|p| p.revents & (libc::POLLIN | libc::POLLHUP) != 0))
}

fn pollfd(fd: BorrowedFd<'_>, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }
}

/// One `ppoll(2)` over `pfds`: whether any descriptor has events (an interrupted wait: no).
fn ppoll(pfds: &mut [libc::pollfd], timeout: Option<Duration>) -> Result<bool> {
    let ts = timeout.map(timespec);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a valid, writable array of `pfds.len()` pollfds; `ts_ptr` is null or
    // points to a timespec that lives until the call returns; a null signal mask means "do
    // not change it".
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EINTR) => Ok(false),
            _ => Err(Error::from_io("ppoll", err)),
        };
    }
    Ok(rc > 0)
}

/// The error of a socket `ppoll` reported an error or a hang-up for: its pending error, or
/// "network down" without one.
fn socket_error(fd: BorrowedFd<'_>) -> Error {
    let sock_err =
        nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SocketError).unwrap_or(0);
    let errno = if sock_err != 0 {
        sock_err
    } else {
        libc::ENETDOWN
    };
    Error::from_errno("waiting on the packet socket", errno)
}

/// Waits until `ready()` returns true, at most `timeout`, the way `strategy` says. `ready` is
/// the cheap userspace check (e.g. "is the next ring frame ours?"); `fd` is what to block on.
/// Returns whether `ready()` became true.
pub fn wait_until(
    fd: BorrowedFd<'_>,
    interest: Interest,
    strategy: Strategy,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<bool> {
    if ready() {
        return Ok(true);
    }
    let start = Instant::now();
    let deadline = start.checked_add(timeout);
    let remaining = |now: Instant| deadline.map(|d| d.saturating_duration_since(now));
    if let Strategy::Doze { interval } = strategy {
        // Every nap is a whole interval, also the one a deadline falls in: a dozing waiter
        // looks at its queue once per interval, and a nap cut short for a timer only adds a
        // wake-up between two looks (a bulk receiver's NACK and hold timers made a third of
        // its naps short, and its context switches 15% more).
        loop {
            // The last look (before the loop, or after the nap) found nothing.
            if remaining(Instant::now()) == Some(Duration::ZERO) {
                return Ok(false);
            }
            std::thread::sleep(interval);
            if ready() {
                return Ok(true);
            }
        }
    }
    let spin_for = match strategy {
        Strategy::Doze { .. } => Duration::ZERO,
        Strategy::Spin => timeout,
        Strategy::Block => Duration::ZERO,
        Strategy::Adaptive { spin } => spin.min(timeout),
    };
    // Adaptive waits are for shared machines: yield the CPU while spinning, so that a thread we
    // wait for (the other end, on the same core) can run; pure spinning is for dedicated cores.
    let yield_while_spinning = matches!(strategy, Strategy::Adaptive { .. });
    if !spin_for.is_zero() {
        loop {
            if ready() {
                return Ok(true);
            }
            let spun = start.elapsed();
            if spun >= spin_for {
                break;
            }
            if yield_while_spinning {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if spin_for >= timeout {
            return Ok(ready());
        }
    }
    loop {
        let left = remaining(Instant::now());
        if left == Some(Duration::ZERO) {
            return Ok(ready());
        }
        poll_fd(fd, interest, left)?;
        if ready() {
            return Ok(true);
        }
    }
}

/// Waits until `fd` is ready for `interest`, at most `timeout`, the way `strategy` says (spins
/// with zero-timeout polls). For sockets without a cheaper userspace readiness check.
pub fn wait_fd(
    fd: BorrowedFd<'_>,
    interest: Interest,
    strategy: Strategy,
    timeout: Duration,
) -> Result<bool> {
    let mut err = None;
    let ok = wait_until(fd, interest, strategy, timeout, || {
        match poll_fd(fd, interest, Some(Duration::ZERO)) {
            Ok(r) => r,
            Err(e) => {
                err = Some(e);
                true
            }
        }
    })?;
    match err {
        Some(e) => Err(e),
        None => Ok(ok),
    }
}

/// `d` as the kernel's timespec for a relative timeout (seconds capped at `i32::MAX`).
pub(crate) fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn every_strategy_times_out_and_sees_readiness() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let doze = Strategy::Doze {
            interval: Strategy::DEFAULT_DOZE,
        };
        for s in [Strategy::Spin, Strategy::Block, Strategy::default(), doze] {
            let t = Instant::now();
            assert!(!wait_fd(b.as_fd(), Interest::Read, s, Duration::from_millis(20)).unwrap());
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(20), "{s:?} {took:?}");
            assert!(took < Duration::from_millis(500), "{s:?} {took:?}");
            a.send(b"x").unwrap();
            assert!(wait_fd(b.as_fd(), Interest::Read, s, Duration::from_secs(1)).unwrap());
            let mut buf = [0u8; 4];
            b.recv(&mut buf).unwrap();
        }
        assert!(poll_fd(a.as_fd(), Interest::Write, Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn a_doze_naps_whole_intervals_even_when_its_deadline_comes_sooner() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let interval = Duration::from_millis(40);
        let doze = Strategy::Doze { interval };
        let mut looks = 0;
        let t = Instant::now();
        let seen = wait_until(
            b.as_fd(),
            Interest::Read,
            doze,
            Duration::from_millis(5),
            || {
                looks += 1;
                false
            },
        )
        .unwrap();
        assert!(!seen);
        // One look before the nap, one after it: no wake-up at the 5 ms deadline.
        assert_eq!(looks, 2);
        assert!(t.elapsed() >= interval, "{:?}", t.elapsed());
        // A frame already queued is seen at the first look.
        a.send(b"x").unwrap();
        assert!(wait_fd(b.as_fd(), Interest::Read, doze, Duration::from_millis(5)).unwrap());
    }

    #[test]
    fn poll_readable_wakes_for_any_descriptor_and_for_a_closed_pipe() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let fds = [b.as_fd(), r.as_fd()];
        let t = Instant::now();
        assert!(!poll_readable(&fds, Some(Duration::from_micros(300))).unwrap());
        // Nanosecond timeouts: 300 µs is neither a busy loop nor a millisecond.
        assert!(t.elapsed() >= Duration::from_micros(300));
        a.send(b"x").unwrap();
        assert!(poll_readable(&fds, Some(Duration::from_secs(1))).unwrap());
        let mut buf = [0u8; 4];
        b.recv(&mut buf).unwrap();
        assert!(!poll_readable(&fds, Some(Duration::ZERO)).unwrap());
        // The write end closes: the read end hangs up, which wakes the sleeper.
        drop(w);
        assert!(poll_readable(&fds, Some(Duration::from_secs(1))).unwrap());
    }
}
