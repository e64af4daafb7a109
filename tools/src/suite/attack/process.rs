//! The harness of the scenarios that run the `ethbcast` command: a child process killed when
//! dropped ([`Proc`]), a keyed `send/recv` transfer on a test-bed ([`Transfer`]) and the
//! scratch directory and key file it uses.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};

use super::{io, AttackError};
use crate::netns;
use crate::testbed::Testbed;

/// A child process killed and reaped when dropped.
pub(super) struct Proc(pub(super) Option<Child>);

impl Proc {
    /// Waits up to `limit`; the exit code (None: killed or timed out) and stderr.
    pub(super) fn wait(&mut self, limit: Duration) -> (Option<i32>, String) {
        let Some(mut c) = self.0.take() else {
            return (None, String::new());
        };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(c.try_wait(), Ok(Some(_))) {
            let _ = c.kill();
        }
        match c.wait_with_output() {
            Ok(o) => (
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ),
            Err(e) => (None, e.to_string()),
        }
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

/// A keyed `ethbcast send/recv` transfer on a test-bed.
pub(super) struct Transfer<'a> {
    pub(super) bed: &'a Testbed,
    pub(super) bin: &'a Path,
    pub(super) dir: PathBuf,
    pub(super) key: PathBuf,
    pub(super) receivers: usize,
}

impl Transfer<'_> {
    fn spawn(&self, host: usize, args: &[&str]) -> Result<Proc, AttackError> {
        let mut c: Command =
            netns::command_in(&self.bed.hosts()[host].netns, &self.bin.to_string_lossy())
                .map_err(io("netns"))?;
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Ok(Proc(Some(c.spawn().map_err(io("spawn ethbcast"))?)))
    }

    /// Sends `len` random bytes (seeded by `seed`) from host 0 to hosts 1..=receivers;
    /// returns the problems found.
    pub(super) fn run(&self, len: usize, seed: u64) -> Result<Vec<String>, AttackError> {
        let mut data = vec![0u8; len];
        rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        self.run_with(&data, &format!("{seed}"), &[])
    }

    /// Sends `data` from host 0 to hosts 1..=receivers, the sender given `extra` arguments too
    /// (its files named after `name`); returns the problems found.
    pub(super) fn run_with(
        &self,
        data: &[u8],
        name: &str,
        extra: &[&str],
    ) -> Result<Vec<String>, AttackError> {
        let (seed, len) = (name, data.len());
        let input = self.dir.join(format!("in{seed}.bin"));
        std::fs::write(&input, data).map_err(io("write the input"))?;
        let key = self.key.to_string_lossy().into_owned();
        let outs: Vec<PathBuf> = (1..=self.receivers)
            .map(|i| self.dir.join(format!("out{seed}-{i}.bin")))
            .collect();
        let mut rs = Vec::new();
        for (i, out) in outs.iter().enumerate() {
            let out = out.to_string_lossy();
            rs.push(self.spawn(
                i + 1,
                &[
                    "recv",
                    "--iface",
                    "eth0",
                    "--quiet",
                    "--wait",
                    "30",
                    "--timeout",
                    "10",
                    "--key-file",
                    &key,
                    "-o",
                    &out,
                ],
            )?);
        }
        let n = self.receivers.to_string();
        let input_arg = input.to_string_lossy();
        let send = [
            "send",
            "--iface",
            "eth0",
            "--wait-mode",
            "block",
            "--key-file",
            &key,
            "-i",
            &input_arg,
            "--receivers",
            &n,
            "--wait",
            "30",
            "--quiet",
        ];
        let mut s = self.spawn(0, &[&send[..], extra].concat())?;
        let mut problems = Vec::new();
        let (code, err) = s.wait(Duration::from_secs(60));
        if code != Some(0) {
            problems.push(format!("sender exited {code:?}: {}", err.trim()));
        }
        for (i, r) in rs.iter_mut().enumerate() {
            let (code, err) = r.wait(Duration::from_secs(15));
            if code != Some(0) {
                problems.push(format!(
                    "receiver {} exited {code:?}: {}",
                    i + 1,
                    err.trim()
                ));
            }
        }
        for out in &outs {
            match std::fs::read(out) {
                Ok(got) if got == *data => {}
                Ok(got) => problems.push(format!(
                    "{} differs from the input ({} of {len} bytes)",
                    out.display(),
                    got.len()
                )),
                Err(e) => problems.push(format!("{}: {e}", out.display())),
            }
            let _ = std::fs::remove_file(out);
        }
        let _ = std::fs::remove_file(&input);
        Ok(problems)
    }
}

/// Makes a key file readable by its owner only, as key files must be.
pub(super) fn private(path: &Path) -> Result<(), AttackError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("chmod 600 the key file"))
}

pub(super) fn scratch(prefix: &str) -> Result<(PathBuf, PathBuf), AttackError> {
    let dir = std::env::temp_dir().join(format!("ethbcast-attack-{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let key = dir.join("key");
    std::fs::write(&key, "ethbcast-bench attack transfer key\n").map_err(io("write the key"))?;
    private(&key)?;
    Ok((dir, key))
}
