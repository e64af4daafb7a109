//! Local attacks on a member host: another local user who plants a key file where root looks
//! for one, and a receiver's `-O` command (or a flaw in what feeds it) that tries to regain
//! capabilities after `recv --user` dropped root.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::keys::{random_input, run_on, scratch_dir};
use super::process::private;
use super::{io, AttackError, Scenario};
use crate::harness::group::bed;

/// `nobody`: the other local user of the key-file scenario (no account is needed).
const NOBODY: u32 = 65534;

/// A key file planted by another local user: `nobody` writes a key file of its own (mode 0600,
/// a key it knows) where root's receiver looks for one, in a directory every user may write to
/// (mode 1777, as /tmp); the hostile host sends with that key. Root's `recv --key-file` must
/// refuse the file at once (usage error, naming its owner), so the stranger's send finds no
/// receiver. The control, which shows the attack is real: the same file once root owns it
/// (root trusted its content) lets the stranger's bytes land.
pub(super) fn planted_key_file(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    use std::os::unix::process::CommandExt;
    let bed = bed(prefix, hosts, 0.0)?;
    let stranger = hosts - 1;
    let dir = scratch_dir(prefix)?;
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).map_err(io("create the shared directory"))?;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777))
        .map_err(io("chmod 1777 the shared directory"))?;
    let planted = shared.join("group.key");
    let line = format!("{} {}", ethbcast::RAW_KEY_TAG, "5a".repeat(32));
    let plant = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 077; printf '%s\\n' '{line}' > '{}'",
            planted.display()
        ))
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .map_err(io("plant the key file as nobody"))?;
    let own = dir.join("stranger.key");
    std::fs::write(&own, format!("{line}\n")).map_err(io("write the stranger's key"))?;
    private(&own)?;
    let fake_in = dir.join("stranger.bin");
    let fake = random_input(&fake_in, 300_000, 4)?;
    let mut problems = Vec::new();
    if !plant.success() {
        problems.push(format!("nobody could not plant the key file: {plant}"));
    }
    let attempt = |out: &Path| -> Result<(Option<i32>, String, Option<i32>, bool), AttackError> {
        let recv = [
            "recv",
            "--iface",
            "eth0",
            "--quiet",
            "--wait",
            "10",
            "--timeout",
            "10",
        ];
        let mut r = run_on(
            &bed,
            bin,
            1,
            &[
                &recv[..],
                &["--key-file", &path(&planted), "-o", &path(out)],
            ]
            .concat(),
        )?;
        let mut s = run_on(
            &bed,
            bin,
            stranger,
            &[
                "send",
                "--iface",
                "eth0",
                "--quiet",
                "--receivers",
                "1",
                "--wait",
                "6",
                "--key-file",
                &path(&own),
                "-i",
                &path(&fake_in),
            ],
        )?;
        let (r_code, r_err) = r.wait(Duration::from_secs(30));
        let (s_code, _) = s.wait(Duration::from_secs(30));
        let took = std::fs::read(out).is_ok_and(|d| d == fake);
        Ok((r_code, r_err, s_code, took))
    };
    let (r_code, r_err, s_code, took) = attempt(&dir.join("planted.bin"))?;
    if took || r_code != Some(2) || !r_err.contains("owned by uid 65534") {
        problems.push(format!(
            "recv --key-file with a key file nobody planted: exit {r_code:?}, {} the stranger's bytes: {}",
            if took { "wrote" } else { "did not write" },
            r_err.trim()
        ));
    }
    if s_code == Some(0) {
        problems.push("the stranger's send completed: a receiver joined it".into());
    }
    std::os::unix::fs::chown(&planted, Some(0), Some(0)).map_err(io("chown the planted file"))?;
    let (c_code, c_err, _, control) = attempt(&dir.join("control.bin"))?;
    if !control {
        problems.push(format!(
            "control (the planted file owned by root): the stranger's bytes did not land (receiver exit {c_code:?}: {}), so the attack was not shown",
            c_err.trim()
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Scenario {
        name: "key-file-planted-by-another-user".into(),
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "nobody planted a 0600 key file in a directory of mode 1777; root's recv --key-file refused it at once (exit 2, naming its owner) and the stranger sending with that key found no receiver; the same file owned by root let the stranger's {} bytes land (the attack)",
                fake.len()
            )
        } else {
            problems.join("; ")
        },
        ..Scenario::default()
    })
}

/// A receiver's command that tries to regain capabilities after `recv --user` dropped root: a
/// keyed transfer to `recv --user nobody -O CMD`, whose command runs a copy of `cat` that
/// carries a file capability (`cap_dac_read_search+ep`, as a setuid or file-capability program
/// anywhere on the host would) on a file only root may read, and records its own bounding set
/// and `no_new_privs`. The command must get the stream and nothing more: the file stays
/// unread, the bounding set empty, `no_new_privs` set. The control, which shows the attack is
/// real: the same program run as `nobody` by a process that kept its bounding set reads the
/// file.
pub(super) fn user_command_regains_capabilities(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    use std::os::unix::process::CommandExt;
    let bed = bed(prefix, hosts, 0.0)?;
    let dir = scratch_dir(prefix)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod 755 the scratch directory"))?;
    let work = dir.join("nobody");
    std::fs::create_dir(&work).map_err(io("create the command's directory"))?;
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777))
        .map_err(io("chmod 777 the command's directory"))?;
    let marker = format!("root's secret {:016x}", rand::random::<u64>());
    let secret = dir.join("secret");
    std::fs::write(&secret, &marker).map_err(io("write the secret"))?;
    private(&secret)?;
    let capcat = dir.join("capcat");
    std::fs::copy("/bin/cat", &capcat).map_err(io("copy /bin/cat"))?;
    std::fs::set_permissions(&capcat, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod the program"))?;
    let setcap = crate::testbed::find_tool("setcap").ok_or_else(|| AttackError::Io {
        context: "setcap (Debian's libcap2-bin)".into(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    let set = std::process::Command::new(setcap)
        .args(["cap_dac_read_search+ep", &path(&capcat)])
        .status()
        .map_err(io("setcap"))?;
    let mut problems = Vec::new();
    if !set.success() {
        problems.push(format!("setcap on the program failed: {set}"));
    }
    // The control: nobody, with the bounding set of a process that never dropped it.
    let control = std::process::Command::new(&capcat)
        .arg(&secret)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .map_err(io("run the program as nobody"))?;
    let shown = String::from_utf8_lossy(&control.stdout).contains(&marker);
    if !shown {
        problems.push(format!(
            "control: the file-capability program run as nobody did not read the file ({}), so the attack was not shown",
            String::from_utf8_lossy(&control.stderr).trim()
        ));
    }
    let key = dir.join("key");
    std::fs::write(&key, "ethbcast attack suite local key\n").map_err(io("write the key"))?;
    private(&key)?;
    let input = dir.join("in.bin");
    let data = random_input(&input, 200_000, 5)?;
    let w = work.display();
    let cmd = format!(
        "{} {} > {w}/got 2> {w}/err; grep -E '^(CapBnd|NoNewPrivs):' /proc/self/status > {w}/status; cat > {w}/out",
        capcat.display(),
        secret.display()
    );
    let mut r = run_on(
        &bed,
        bin,
        1,
        &[
            "recv",
            "--iface",
            "eth0",
            "--quiet",
            "--wait",
            "20",
            "--timeout",
            "10",
            "--key-file",
            &path(&key),
            "--user",
            "nobody",
            "-O",
            &cmd,
        ],
    )?;
    let mut s = run_on(
        &bed,
        bin,
        0,
        &[
            "send",
            "--iface",
            "eth0",
            "--quiet",
            "--receivers",
            "1",
            "--wait",
            "20",
            "--key-file",
            &path(&key),
            "-i",
            &path(&input),
        ],
    )?;
    let (s_code, s_err) = s.wait(Duration::from_secs(40));
    let (r_code, r_err) = r.wait(Duration::from_secs(20));
    if s_code != Some(0) || r_code != Some(0) {
        problems.push(format!(
            "sender exit {s_code:?} ({}), receiver exit {r_code:?} ({})",
            s_err.trim(),
            r_err.trim()
        ));
    }
    if !std::fs::read(work.join("out")).is_ok_and(|d| d == data) {
        problems.push("the command did not get the stream intact".into());
    }
    let read = |f: &str| std::fs::read_to_string(work.join(f)).unwrap_or_default();
    if read("got").contains(&marker) {
        problems.push("the command read root's file through the file-capability program".into());
    }
    let status = read("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map_or("absent", str::trim)
            .to_string()
    };
    let (bounding, nnp) = (field("CapBnd:"), field("NoNewPrivs:"));
    if bounding != "0000000000000000" || nnp != "1" {
        problems.push(format!(
            "the command ran with bounding set {bounding} and no_new_privs {nnp}"
        ));
    }
    let refused = read("err");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Scenario {
        name: "recv-user-command-regains-capabilities".into(),
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "recv --user nobody -O ran its command with bounding set {bounding} and no_new_privs {nnp}; it got the {} bytes intact, and a cap_dac_read_search+ep copy of cat it ran could not read a root-only file ({}), which the same program run as nobody by a process with a full bounding set read (the attack)",
                data.len(),
                refused.trim()
            )
        } else {
            problems.join("; ")
        },
        ..Scenario::default()
    })
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
