//! `ethbcast send` / `ethbcast recv` run by an unprivileged user, as on a host where the Debian
//! package is installed: a copy of the binary with the file capabilities the package's postinst
//! sets (`cap_net_raw,cap_net_admin+ep`), run as `nobody` with no capabilities of its own
//! (`setpriv --reuid --regid --clear-groups --inh-caps=-all`) inside the test-bed's host
//! namespaces. Without the capabilities, or when the kernel ignores them, the error must name
//! CAP_NET_RAW and say what to do.
//!
//! Needs root (to build the test-bed and to run `setcap`), `setpriv` (util-linux) and `setcap`
//! (libcap2-bin); with `ETHBCAST_REQUIRE_NETNS=1` (CI) a missing piece fails the test.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ethbcast_tools::testbed::{find_tool, netns_available, Testbed, TestbedConfig};
use rand::{RngCore, SeedableRng};

/// `nobody` on Debian (and most distributions); the test needs no account of its own.
const NOBODY: u32 = 65534;

/// The setpriv arguments that drop to `nobody` with no capabilities and no supplementary
/// groups, keeping the bounding set (so that file capabilities can still be gained).
fn as_nobody() -> Vec<String> {
    vec![
        format!("--reuid={NOBODY}"),
        format!("--regid={NOBODY}"),
        "--clear-groups".into(),
        "--inh-caps=-all".into(),
    ]
}

/// A scratch directory for the binaries and data, on a file system that honours file
/// capabilities (not mounted nosuid), readable and searchable by `nobody`. Removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let candidates = [
            std::env::temp_dir(),
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        ];
        let base = candidates.iter().find(|d| !nosuid(d)).unwrap_or_else(|| {
            panic!("every candidate scratch directory ({candidates:?}) is mounted nosuid")
        });
        let dir = base.join(format!("ethbcast-unpriv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Only the receivers (as nobody) write here.
        std::os::unix::fs::chown(dir.join("out"), Some(NOBODY), Some(NOBODY)).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn nosuid(dir: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    statvfs(dir).map_or(true, |s| s.flags().contains(FsFlags::ST_NOSUID))
}

/// Copies the ethbcast binary to `dest` (mode 755), with `caps` set on it if given.
fn install_copy(dest: &Path, caps: Option<&str>) {
    std::fs::copy(env!("CARGO_BIN_EXE_ethbcast"), dest).unwrap();
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    if let Some(caps) = caps {
        let o = Command::new(find_tool("setcap").unwrap())
            .arg(caps)
            .arg(dest)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "setcap {caps} {}: {}",
            dest.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Whether setpriv and setcap are here (else fails under ETHBCAST_REQUIRE_NETNS=1).
fn tools_available(test: &str) -> bool {
    if !netns_available(test, false) {
        return false;
    }
    let missing: Vec<&str> = [("setpriv", "util-linux"), ("setcap", "libcap2-bin")]
        .into_iter()
        .filter(|(t, _)| find_tool(t).is_none())
        .map(|(_, p)| p)
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("apt-get install {}", missing.join(" "));
    assert!(
        std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
        "{test}: {reason}"
    );
    eprintln!("SKIPPED: {test}: {reason}");
    false
}

/// A child killed (by pid) and reaped when dropped.
struct Proc(Option<Child>);

impl Proc {
    fn wait_timeout(&mut self, limit: Duration) -> Output {
        let mut c = self.0.take().expect("running");
        let deadline = Instant::now() + limit;
        while c.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let out = c.wait_with_output().expect("output");
                panic!(
                    "process did not finish within {limit:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        c.wait_with_output().expect("output")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `ip netns exec NS setpriv <setpriv_args> BIN args...`, output captured.
fn spawn_as(ns: &str, setpriv_args: &[String], bin: &Path, args: &[&str]) -> Proc {
    let c = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(find_tool("setpriv").unwrap())
        .args(setpriv_args)
        .arg(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ip netns exec setpriv ethbcast");
    Proc(Some(c))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn nobody_transfers_a_file_with_a_capability_granted_binary() {
    let test = "nobody_transfers_a_file_with_a_capability_granted_binary";
    if !tools_available(test) {
        return;
    }
    let tb =
        Testbed::up(&TestbedConfig::new(3).prefix(format!("uc{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let scratch = Scratch::new("transfer");
    let dir = &scratch.0;
    let bin = dir.join("ethbcast");
    install_copy(&bin, Some("cap_net_raw,cap_net_admin+ep"));
    let mut data = vec![0u8; 8 << 20];
    rand::rngs::SmallRng::seed_from_u64(16).fill_bytes(&mut data);
    let input = dir.join("input.bin");
    std::fs::write(&input, &data).unwrap();
    std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o644)).unwrap();

    let nobody = as_nobody();
    let outs: Vec<PathBuf> = (1..3).map(|i| dir.join(format!("out/{i}.bin"))).collect();
    let mut receivers: Vec<Proc> = (1..3)
        .map(|i| {
            spawn_as(
                &tb.hosts()[i].netns,
                &nobody,
                &bin,
                &[
                    "recv",
                    "--insecure",
                    "--iface",
                    "eth0",
                    "--wait",
                    "60",
                    "--timeout",
                    "20",
                    "--json",
                    "-o",
                    outs[i - 1].to_str().unwrap(),
                ],
            )
        })
        .collect();
    let mut sender = spawn_as(
        &tb.hosts()[0].netns,
        &nobody,
        &bin,
        &[
            "send",
            "--insecure",
            "--iface",
            "eth0",
            "-i",
            input.to_str().unwrap(),
            "--receivers",
            "2",
            "--wait",
            "30",
            "--quiet",
            "--json",
        ],
    );
    let s = sender.wait_timeout(Duration::from_secs(120));
    assert_eq!(s.status.code(), Some(0), "sender: {}", text(&s.stderr));
    let report: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    for (r, out) in receivers.iter_mut().zip(&outs) {
        let o = r.wait_timeout(Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(0), "receiver: {}", text(&o.stderr));
        assert!(
            std::fs::read(out).unwrap() == data,
            "{} differs",
            out.display()
        );
        // Written by the receiver itself, which ran as nobody.
        assert_eq!(std::fs::metadata(out).unwrap().uid(), NOBODY);
    }
    drop(tb);
}

#[test]
fn without_the_capabilities_the_error_names_cap_net_raw_and_the_remedy() {
    let test = "without_the_capabilities_the_error_names_cap_net_raw_and_the_remedy";
    if !tools_available(test) {
        return;
    }
    let tb =
        Testbed::up(&TestbedConfig::new(1).prefix(format!("un{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let ns = &tb.hosts()[0].netns;
    let scratch = Scratch::new("refused");
    let plain = scratch.0.join("ethbcast-plain");
    install_copy(&plain, None);
    let recv_args = ["recv", "--insecure", "--iface", "eth0", "--wait", "1"];
    let check = |mut p: Proc| {
        let o = p.wait_timeout(Duration::from_secs(30));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(err.contains("CAP_NET_RAW"), "{err}");
        err
    };

    // A binary without file capabilities: the exact setcap command for this very file.
    let err = check(spawn_as(ns, &as_nobody(), &plain, &recv_args));
    let setcap = format!(
        "sudo setcap cap_net_raw,cap_net_admin+ep {}",
        plain.display()
    );
    assert!(err.contains(&setcap), "{err}");

    // A copy that carries the capabilities on a nosuid mount (as home directories and
    // scratch file systems of clusters often are): the kernel ignores them, running setcap
    // again would not help, and the error says so. The mount lives in a mount namespace of
    // its own and vanishes with it.
    let mnt = scratch.0.join("nosuid");
    std::fs::create_dir(&mnt).unwrap();
    let bin = mnt.join("ethbcast");
    let script = format!(
        "mount -t tmpfs -o nosuid,mode=755 tmpfs {mnt} && cp {plain} {bin} && \
         setcap cap_net_raw,cap_net_admin+ep {bin} && \
         exec ip netns exec {ns} {setpriv} {nobody} {bin} {args}",
        mnt = mnt.display(),
        plain = plain.display(),
        bin = bin.display(),
        setpriv = find_tool("setpriv").unwrap().display(),
        nobody = as_nobody().join(" "),
        args = recv_args.join(" "),
    );
    let child = Command::new(find_tool("unshare").expect("unshare (util-linux)"))
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare");
    let err = check(Proc(Some(child)));
    assert!(err.contains("mounted nosuid"), "{err}");
    assert!(
        err.contains(&format!("{} carries it", bin.display())),
        "{err}"
    );
    drop(tb);
}

/// `recv --resume` run by a user who cannot open the partial output it finds (another user's
/// file, planted): not its own, so it receives into a fresh temporary file (as for a link or
/// a file of another owner) instead of failing.
#[test]
fn resume_takes_a_partial_output_it_cannot_open_as_not_its_own() {
    let test = "resume_takes_a_partial_output_it_cannot_open_as_not_its_own";
    if !tools_available(test) {
        return;
    }
    let tb =
        Testbed::up(&TestbedConfig::new(1).prefix(format!("ur{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let scratch = Scratch::new("resume");
    let dir = &scratch.0;
    let bin = dir.join("ethbcast");
    install_copy(&bin, Some("cap_net_raw,cap_net_admin+ep"));
    // Planted by another user (root here), readable by no one else.
    let planted = dir.join("out/.x.bin.ethbcast.part");
    std::fs::write(&planted, b"someone else's").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = dir.join("out/x.bin");
    let mut r = spawn_as(
        &tb.hosts()[0].netns,
        &as_nobody(),
        &bin,
        &[
            "recv",
            "--insecure",
            "--iface",
            "eth0",
            "--wait",
            "1",
            "--resume",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let o = r.wait_timeout(Duration::from_secs(30));
    let e = text(&o.stderr);
    // It got as far as waiting for a sender: a join timeout, not an error opening the file.
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("not a partial output of this user"), "{e}");
    assert_eq!(std::fs::read(&planted).unwrap(), b"someone else's");
    drop(tb);
}
