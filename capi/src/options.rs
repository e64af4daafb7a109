//! The options of `ethbcast_open` from C: their sizes (the ABI's growth), their defaults, and
//! what they mean for the endpoint. The unsafe reading of a caller's bytes stays with the
//! `extern "C"` functions (`read_options` in the crate's root).

use std::mem::size_of;
use std::time::Duration;

use ethbcast::{Algorithm, GroupOptions, HostOptions, Membership, WaitMode};

use crate::endpoint::{EndpointOptions, Placement};
use crate::failure::Failure;
use crate::{
    EthbcastOptions, ETHBCAST_ABI_VERSION, ETHBCAST_ALGO_PUSHPULL, ETHBCAST_ALGO_SIMPLE,
    ETHBCAST_ALGO_TREE, ETHBCAST_HOST_SPIN_FOREVER, ETHBCAST_ROOT_WAITS_AUTO,
    ETHBCAST_WAIT_ADAPTIVE, ETHBCAST_WAIT_BLOCK, ETHBCAST_WAIT_DOZE, ETHBCAST_WAIT_PATIENT,
    ETHBCAST_WAIT_SPIN,
};

/// The wait modes the header names, each with the library's mode: read both ways, so that
/// the C defaults are the library's.
const WAITS: [(u32, WaitMode); 5] = [
    (ETHBCAST_WAIT_ADAPTIVE, WaitMode::Adaptive),
    (ETHBCAST_WAIT_BLOCK, WaitMode::Block),
    (ETHBCAST_WAIT_SPIN, WaitMode::Spin),
    (ETHBCAST_WAIT_DOZE, WaitMode::Doze),
    (ETHBCAST_WAIT_PATIENT, WaitMode::Patient),
];

/// The broadcast algorithms the header names, each with the library's (as [`WAITS`]).
const ALGORITHMS: [(u32, Algorithm); 3] = [
    (ETHBCAST_ALGO_PUSHPULL, Algorithm::PushPull),
    (ETHBCAST_ALGO_SIMPLE, Algorithm::Simple),
    (ETHBCAST_ALGO_TREE, Algorithm::Tree),
];

/// The library's value of C code `code` in `table`.
fn from_code<T: Copy>(table: &[(u32, T)], code: u32) -> Option<T> {
    table.iter().find(|(c, _)| *c == code).map(|&(_, v)| v)
}

/// The C code of the library's `value` in `table` (every value the library defaults to has
/// one; `u32::MAX`, which no call takes, otherwise).
fn code_of<T: PartialEq>(table: &[(u32, T)], value: T) -> u32 {
    table
        .iter()
        .find(|(_, v)| *v == value)
        .map_or(u32::MAX, |&(c, _)| c)
}

/// The size of the options of this library (ABI 1: the smallest a caller may pass, too).
pub(crate) const OPTIONS_SIZE: usize = size_of::<EthbcastOptions>();
/// The smallest options a caller may pass: those of the first layout with a size field.
const OPTIONS_MIN_SIZE: usize = OPTIONS_SIZE;
/// The largest options a caller may pass: room for later fields, and a bound that catches a
/// size field that was never set.
const OPTIONS_MAX_SIZE: usize = 4096;

impl Default for EthbcastOptions {
    fn default() -> Self {
        let g = GroupOptions::default();
        EthbcastOptions {
            // The struct has 64 bytes; the cast cannot truncate.
            size: OPTIONS_SIZE as u32,
            group_id: g.group_id,
            timeout_ms: u32::try_from(g.timeout.as_millis()).unwrap_or(u32::MAX),
            wait: code_of(&WAITS, g.wait),
            algorithm: code_of(&ALGORITHMS, g.algorithm),
            expected: 0,
            progress_thread: 1,
            linger_ms: 50,
            root_waits_above: ETHBCAST_ROOT_WAITS_AUTO,
            host_spin_us: u32::try_from(ethbcast::HostWait::default().spin.as_micros())
                .unwrap_or(0),
            key: std::ptr::null(),
            key_len: 0,
            key_file: std::ptr::null(),
        }
    }
}

/// The options of `ethbcast_open` from C, without the key (see `open_options`).
pub(crate) fn options_from(c: &EthbcastOptions) -> Result<EndpointOptions, Failure> {
    let wait = from_code(&WAITS, c.wait)
        .ok_or_else(|| Failure::invalid(format!("unknown wait mode {}", c.wait)))?;
    let algorithm = from_code(&ALGORITHMS, c.algorithm)
        .ok_or_else(|| Failure::invalid(format!("unknown algorithm {}", c.algorithm)))?;
    if c.timeout_ms == 0 {
        return Err(Failure::invalid("timeout_ms must be positive"));
    }
    let membership = match c.expected {
        0 => Membership::Env,
        n => Membership::Discover {
            expected: u16::try_from(n)
                .map_err(|_| Failure::invalid(format!("expected {n} members: at most 65534")))?,
        },
    };
    Ok(EndpointOptions {
        host: HostOptions {
            group: GroupOptions {
                group_id: c.group_id,
                wait,
                algorithm,
                timeout: Duration::from_millis(u64::from(c.timeout_ms)),
                ..GroupOptions::default()
            },
            membership,
            root_waits_above: (c.root_waits_above != ETHBCAST_ROOT_WAITS_AUTO)
                .then_some(c.root_waits_above as usize),
            placement: Placement::Auto,
            host_wait: ethbcast::HostWait {
                spin: match c.host_spin_us {
                    ETHBCAST_HOST_SPIN_FOREVER => Duration::MAX,
                    us => Duration::from_micros(u64::from(us)),
                },
            },
        },
        progress_thread: c.progress_thread != 0,
        linger: Duration::from_millis(u64::from(c.linger_ms)),
    })
}

/// Refuses an options size outside what any layout with a size field can have.
pub(crate) fn check_options_size(size: usize) -> Result<(), Failure> {
    if (OPTIONS_MIN_SIZE..=OPTIONS_MAX_SIZE).contains(&size) {
        return Ok(());
    }
    Err(Failure::invalid(format!(
        "options size {size} is not between {OPTIONS_MIN_SIZE} and {OPTIONS_MAX_SIZE} bytes: fill the options with ethbcast_options_default from the ethbcast.h of libethbcast_capi ABI {ETHBCAST_ABI_VERSION} or later (a program built against an older ethbcast.h, whose options carry no size, must be rebuilt)"
    )))
}
