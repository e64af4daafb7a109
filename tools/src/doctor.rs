//! `ethbcast doctor`: checks of this host before a transfer, one line per check and, for each
//! problem, its fix: the interface (exists, is up, is Ethernet, its MTU), the capabilities,
//! the receive buffer limit (`net.core.rmem_max`), the backend (`ETHBCAST_BACKEND` overrides
//! `--backend`), and finally opening the link as `send`/`recv` would. Across hosts (whether a
//! broadcast, a full-sized frame and the group's multicast address reach each host of a
//! hostfile, and its MTU): [`hosts`].

pub mod hosts;

use std::path::Path;

use ethbcast::{Backend, WaitMode, BACKEND_ENV};
use ethbcast_sys::caps::{Advice, Capability, ProcessCaps};
use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, but not as well as it could.
    Warn,
    /// A transfer would fail.
    Fail,
}

/// One check: one line of the text output, one object of `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked, as a stable name for scripts (`interface.up`, `cap.net_raw`,
    /// `key.mode`, `host.broadcast`, ...).
    pub id: &'static str,
    /// Where: `local` for this host, a hostfile's host name (else its MAC) for the checks
    /// across hosts.
    pub host: String,
    /// Outcome.
    pub status: Status,
    /// What was found.
    pub what: String,
    /// What to do about it (warnings and failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(id: &'static str, what: String) -> Check {
        Check {
            id,
            host: LOCAL.into(),
            status: Status::Ok,
            what,
            fix: None,
        }
    }

    fn problem(id: &'static str, status: Status, what: String, fix: String) -> Check {
        Check {
            id,
            host: LOCAL.into(),
            status,
            what,
            fix: Some(fix),
        }
    }

    /// The same check, of `host`.
    pub fn on(mut self, host: impl Into<String>) -> Check {
        self.host = host.into();
        self
    }

    /// The check's line: `ok`, `WARN` or `FAIL`, what was found, and the fix.
    pub fn render(&self) -> String {
        let tag = match self.status {
            Status::Ok => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        match &self.fix {
            Some(f) => format!("{tag}  {}; fix: {f}", self.what),
            None => format!("{tag}  {}", self.what),
        }
    }
}

/// [`Check::host`] of this host's checks.
pub const LOCAL: &str = "local";

/// `IFF_UP` of `/sys/class/net/IFACE/flags`.
const IFF_UP: u32 = 0x1;
/// `ARPHRD_ETHER`.
const ARPHRD_ETHER: u32 = 1;

fn read_sys(iface: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(iface).join(file))
        .ok()
        .map(|s| s.trim().to_owned())
}

fn parse_number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// If `iface` is set down (`ip link set IFACE down`): saying so, and the fix.
pub fn admin_down(iface: &str) -> Option<(String, String)> {
    let flags = parse_number(&read_sys(iface, "flags")?)?;
    (flags & IFF_UP == 0).then(|| {
        (
            format!("interface {iface} is down"),
            format!("ip link set {iface} up"),
        )
    })
}

/// Why `iface` cannot carry frames now, with the fix, if it is down (`None` if it is up or
/// does not exist).
pub fn interface_down(iface: &str) -> Option<(String, String)> {
    if let Some(down) = admin_down(iface) {
        return Some(down);
    }
    match read_sys(iface, "operstate").as_deref() {
        Some("down") | Some("lowerlayerdown") => Some((
            format!("interface {iface} is up but has no link (no carrier)"),
            format!("check the cable and the switch port of {iface} (`ip link show {iface}`)"),
        )),
        _ => None,
    }
}

/// `doctor --key-file PATH`: the group key file as `send` and `recv` will read it for
/// `group_id`: readable, by its owner alone (mode), owned by this user or root, and well
/// formed. Whether every host holds the same key, the probes of [`hosts`] tell.
pub fn key_file(path: &Path, group_id: u32) -> Vec<Check> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            return vec![Check::problem(
                "key.file",
                Status::Fail,
                format!("key file {shown}: {e}"),
                format!("give the path of the key file (`ethbcast keygen {shown}` writes one; copy the same file to every host)"),
            )]
        }
    };
    let mut checks = Vec::new();
    let mode = m.mode() & 0o777;
    if mode & 0o077 == 0 {
        checks.push(Check::ok(
            "key.mode",
            format!("key file {shown} has mode {mode:04o}"),
        ));
    } else {
        checks.push(Check::problem(
            "key.mode",
            Status::Fail,
            format!("key file {shown} has mode {mode:04o}: others may read the key"),
            format!("chmod 600 {shown}"),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() == me || m.uid() == 0 {
        checks.push(Check::ok(
            "key.owner",
            format!(
                "key file {shown} belongs to uid {} (this user or root)",
                m.uid()
            ),
        ));
    } else {
        checks.push(Check::problem(
            "key.owner",
            Status::Fail,
            format!(
                "key file {shown} belongs to uid {}, neither this user (uid {me}) nor root: another user could have planted it",
                m.uid()
            ),
            format!("chown {me} {shown} (after checking that the key is yours)"),
        ));
    }
    match ethbcast::read_key_file(path, group_id) {
        Ok(_) => checks.push(Check::ok(
            "key.read",
            format!("key file {shown} holds a group key"),
        )),
        Err(e) => checks.push(Check::problem(
            "key.read",
            Status::Fail,
            format!("key file {shown}: {e}"),
            format!("write a new one with `ethbcast keygen {shown}` and copy it to every host"),
        )),
    }
    checks
}

/// Runs every check for a transfer on `iface` with `backend` and receive queues of
/// `rx_frames` frames.
pub fn run(iface: &str, backend: Backend, rx_frames: usize) -> Vec<Check> {
    let mut checks = Vec::new();
    if !Path::new("/sys/class/net").join(iface).exists() || iface.contains('/') {
        checks.push(Check::problem(
            "interface.exists",
            Status::Fail,
            format!("interface {iface} does not exist"),
            "pick one of `ip link` (and check the network namespace)".into(),
        ));
        return checks;
    }
    match interface_down(iface) {
        Some((what, fix)) => checks.push(Check::problem("interface.up", Status::Fail, what, fix)),
        None => checks.push(Check::ok(
            "interface.up",
            format!("interface {iface} is up"),
        )),
    }
    match read_sys(iface, "type").as_deref().and_then(parse_number) {
        Some(ARPHRD_ETHER) => {}
        t => checks.push(Check::problem(
            "interface.ethernet",
            Status::Fail,
            format!(
                "interface {iface} is not an Ethernet interface (hardware type {})",
                t.map_or("unknown".into(), |t| t.to_string())
            ),
            "pick an Ethernet or veth interface".into(),
        )),
    }
    let min = usize::from(ethbcast_proto::join::MIN_PDU);
    match read_sys(iface, "mtu").as_deref().and_then(parse_number) {
        Some(m) if m as usize >= min => checks.push(Check::ok(
            "interface.mtu",
            format!("interface {iface} has an MTU of {m} bytes"),
        )),
        m => checks.push(Check::problem(
            "interface.mtu",
            Status::Fail,
            format!(
                "interface {iface} has an MTU of {} bytes, below the {min} a transfer needs",
                m.map_or("unknown".into(), |m| m.to_string())
            ),
            format!("ip link set {iface} mtu 1500"),
        )),
    }
    let caps = ProcessCaps::current();
    let has = |c| caps.as_ref().is_some_and(|p| p.has(c));
    if has(Capability::NetRaw) {
        checks.push(Check::ok(
            "cap.net_raw",
            "CAP_NET_RAW: raw packet sockets can be opened".into(),
        ));
    } else {
        checks.push(Check::problem(
            "cap.net_raw",
            Status::Fail,
            "CAP_NET_RAW is missing: no raw packet socket can be opened".into(),
            Advice::for_missing(Capability::NetRaw).to_string(),
        ));
    }
    let wanted = rx_frames.saturating_mul(2048);
    let rmem_max: Option<usize> = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if has(Capability::NetAdmin) {
        checks.push(Check::ok(
            "rmem_max",
            format!(
                "CAP_NET_ADMIN: receive buffers of {wanted} bytes whatever net.core.rmem_max says"
            ),
        ));
    } else {
        match rmem_max {
            Some(r) if r >= wanted => checks.push(Check::ok("rmem_max", format!(
                "net.core.rmem_max is {r} bytes, enough for a receive buffer of {wanted}"
            ))),
            r => checks.push(Check::problem("rmem_max", 
                Status::Warn,
                format!(
                    "without CAP_NET_ADMIN a receive buffer is capped at net.core.rmem_max ({} bytes), below the {wanted} a receiver asks for; a busy receiver then loses frames that must be repaired",
                    r.map_or("unknown".into(), |r| r.to_string())
                ),
                format!(
                    "sysctl -w net.core.rmem_max={wanted}, or {}",
                    Advice::for_missing(Capability::NetAdmin)
                ),
            )),
        }
    }
    let resolved = match backend.resolve() {
        Ok(b) if b == backend => {
            checks.push(Check::ok("backend", format!("backend {backend}")));
            Some(b)
        }
        Ok(b) => {
            checks.push(Check::problem(
                "backend",
                Status::Warn,
                format!("{BACKEND_ENV}={b} overrides --backend {backend}"),
                format!("unset {BACKEND_ENV} to use {backend}"),
            ));
            Some(b)
        }
        Err(e) => {
            checks.push(Check::problem(
                "backend",
                Status::Fail,
                e.to_string(),
                format!("unset {BACKEND_ENV} or set it to one of ring, socket, pnet, xdp"),
            ));
            None
        }
    };
    if let Some(b) = resolved {
        if checks.iter().all(|c| c.status != Status::Fail) {
            match ethbcast::open_link(b, iface, WaitMode::Block) {
                Ok(_) => checks.push(Check::ok(
                    "link.open",
                    format!("opened {iface} with the {b} backend"),
                )),
                Err(e) => checks.push(Check::problem(
                    "link.open",
                    Status::Fail,
                    format!("cannot open {iface} with the {b} backend: {e}"),
                    "see the error; `--backend socket` needs the least of the kernel".into(),
                )),
            }
        }
    }
    checks
}
