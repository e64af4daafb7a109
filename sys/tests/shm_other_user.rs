//! A second local user against a job's shared-memory segment (issue 20, item 7).
//!
//! The job runs as root here (the tests need root to act as another user); the attacker is a
//! shell started as `nobody` (uid and gid 65534, no supplementary groups) that works on
//! `/dev/shm` the way any local user can: it pre-creates the segment's name (with mode 0600 or
//! 0666), plants a symbolic link there, or tries to open the job's segment. The job must refuse
//! every file it did not make, with a typed error, and the attacker must not open the job's.
//!
//! Needs root. Without it the tests print a SKIPPED line and pass, unless
//! `ETHBCAST_REQUIRE_NETNS=1` (CI), which turns a missing privilege into a failure.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ethbcast_sys::shm::{Segment, ShmError};

/// `nobody` on Debian and most distributions; no account is needed.
const NOBODY: u32 = 65534;

/// Whether this process runs as root; else prints SKIPPED (or panics under
/// `ETHBCAST_REQUIRE_NETNS=1`).
fn root(test: &str) -> bool {
    let uid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if uid == 0 {
        return true;
    }
    assert!(
        std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
        "{test}: needs root (to act as a second user) and ETHBCAST_REQUIRE_NETNS=1"
    );
    eprintln!("SKIPPED: {test}: needs root to act as a second local user");
    false
}

/// A segment name in /dev/shm unique to this test; removed (whoever owns it) on drop.
struct Name(PathBuf);

impl Name {
    fn new(tag: &str) -> Name {
        let p = Path::new("/dev/shm").join(format!(
            "ethbcast-shm-other-user-{}-{tag}",
            std::process::id()
        ));
        let _ = fs::remove_file(&p);
        Name(p)
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Runs `script` with `sh` as `nobody` (`$1` is `path`); whether it exited with 0.
fn as_nobody(script: &str, path: &Path) -> bool {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(path)
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .output()
        .expect("run sh as nobody");
    eprintln!(
        "as nobody: {script}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out.status.success()
}

#[test]
fn a_second_user_cannot_open_a_jobs_segment() {
    let test = "a_second_user_cannot_open_a_jobs_segment";
    if !root(test) {
        return;
    }
    let name = Name::new("open");
    let seg = Segment::create(&name.0, 4096).unwrap();
    let meta = fs::symlink_metadata(&name.0).unwrap();
    assert_eq!(
        meta.mode() & 0o7777,
        0o600,
        "a segment is made with mode 0600"
    );
    assert_eq!(meta.uid(), 0);
    // Read-write (as a ring's rank would) and read-only: both refused.
    assert!(!as_nobody(r#"exec 3<>"$1""#, &name.0));
    assert!(!as_nobody(r#"exec 3<"$1""#, &name.0));
    // Nor can nobody replace or remove it (/dev/shm is sticky).
    assert!(!as_nobody(r#"rm -f "$1""#, &name.0));
    assert!(name.0.exists());
    drop(seg);
}

#[test]
fn a_segment_pre_created_by_a_second_user_is_refused() {
    let test = "a_segment_pre_created_by_a_second_user_is_refused";
    if !root(test) {
        return;
    }
    // With the job's own mode: only the owner gives it away.
    let name = Name::new("precreate-0600");
    assert!(as_nobody(
        r#"umask 077 && head -c 4096 /dev/zero > "$1""#,
        &name.0
    ));
    assert_eq!(fs::metadata(&name.0).unwrap().uid(), NOBODY);
    match Segment::open(&name.0) {
        Err(ShmError::Foreign { owner, .. }) => assert_eq!(owner, NOBODY),
        other => panic!("opened a segment made by uid {NOBODY}: {other:?}"),
    }
    // The job's own create refuses the name too (it exists), and does not remove it.
    assert!(matches!(
        Segment::create(&name.0, 4096),
        Err(ShmError::Exists(_))
    ));
    match Segment::remove_stale(&name.0) {
        Err(ShmError::Foreign { owner, .. }) => assert_eq!(owner, NOBODY),
        other => panic!("removed or accepted a segment made by uid {NOBODY}: {other:?}"),
    }
    assert!(name.0.exists());

    // World-writable, as a careless or hostile creator would leave it.
    let name = Name::new("precreate-0666");
    assert!(as_nobody(
        r#"head -c 4096 /dev/zero > "$1" && chmod 666 "$1""#,
        &name.0
    ));
    assert!(matches!(
        Segment::open(&name.0),
        Err(ShmError::Foreign { .. })
    ));
}

#[test]
fn a_symlink_planted_at_the_segment_name_is_not_followed() {
    let test = "a_symlink_planted_at_the_segment_name_is_not_followed";
    if !root(test) {
        return;
    }
    // The target: a segment of this job (root's, mode 0600) that the link would make the job
    // open under another name, or any file of root's.
    let target = Name::new("symlink-target");
    let _real = Segment::create(&target.0, 4096).unwrap();
    let name = Name::new("symlink");
    let script = format!(r#"ln -s '{}' "$1""#, target.0.display());
    assert!(as_nobody(&script, &name.0));
    assert!(fs::symlink_metadata(&name.0)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(matches!(Segment::open(&name.0), Err(ShmError::Symlink(_))));
    assert!(matches!(
        Segment::create(&name.0, 4096),
        Err(ShmError::Exists(_))
    ));
    assert!(matches!(
        Segment::remove_stale(&name.0),
        Err(ShmError::Foreign { .. })
    ));
    // The target was not touched (no truncation, no size change).
    assert_eq!(fs::metadata(&target.0).unwrap().len(), 4096);
}

#[test]
fn a_segment_of_this_user_with_another_mode_is_refused() {
    let test = "a_segment_of_this_user_with_another_mode_is_refused";
    if !root(test) {
        return;
    }
    let name = Name::new("mode");
    let seg = Segment::create(&name.0, 4096).unwrap();
    for mode in [0o644, 0o660, 0o666, 0o400, 0o4600] {
        fs::set_permissions(&name.0, fs::Permissions::from_mode(mode)).unwrap();
        match Segment::open(&name.0) {
            Err(ShmError::BadMode { mode: m, .. }) => assert_eq!(m, mode),
            other => panic!("opened a segment of mode {mode:o}: {other:?}"),
        }
    }
    fs::set_permissions(&name.0, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Segment::open(&name.0).is_ok());
    drop(seg);
}
