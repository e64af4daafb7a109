//! MPI jobs on the test-bed: Open MPI's `mpirun` and MPICH's `mpiexec.hydra` start one rank
//! (or K) per network namespace, for the interposer's tests and `ethbcast-bench mpi`.
//!
//! Why it works: both launchers start remote ranks through a remote shell ("ssh"), which
//! either lets us replace. Ours is a four-line script (the agent) that takes the host name as
//! a namespace name and runs the command there with `ip netns exec`. Their out-of-band and
//! TCP traffic needs IPv4, so [`MpiBed::up`] gives every host's `eth0` an address of
//! 10.77.0.0/24; these addresses exist only inside the test-bed's namespaces. mpirun itself
//! runs in the first host's namespace.
//!
//! Quirks handled here (all seen on Debian 12 with Open MPI 4.1 and MPICH 4.0):
//! - every namespace has the same host name, so Open MPI's daemons would share one session
//!   directory in /tmp and trip over each other: the agent gives each host its own;
//! - PMIx complains about its shared-memory store as root: `PMIX_MCA_gds=hash`;
//! - 8 ranks on 2 cores: Open MPI yields when idle (`mpi_yield_when_idle`); MPICH over UCX
//!   busy-polls and cannot be told otherwise, so it is slow here whenever ranks wait in MPI.
#![deny(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::netns;
use crate::{Testbed, TestbedConfig, TestbedError};

/// The interface every host's ranks use (the test-bed's).
pub const IFACE: &str = crate::HOST_IFACE;

/// An MPI implementation as Debian packages it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MpiImpl {
    /// Open MPI (openmpi-bin, libopenmpi-dev).
    OpenMpi,
    /// MPICH with Hydra (mpich, libmpich-dev).
    Mpich,
}

impl MpiImpl {
    /// Both, in a fixed order.
    pub const ALL: [MpiImpl; 2] = [MpiImpl::OpenMpi, MpiImpl::Mpich];

    /// Name in file names and JSON rows.
    pub fn name(self) -> &'static str {
        match self {
            MpiImpl::OpenMpi => "openmpi",
            MpiImpl::Mpich => "mpich",
        }
    }

    /// Its compiler wrapper (Debian installs both side by side under these names).
    pub fn mpicc(self) -> &'static str {
        match self {
            MpiImpl::OpenMpi => "mpicc.openmpi",
            MpiImpl::Mpich => "mpicc.mpich",
        }
    }

    /// Its launcher.
    pub fn mpirun(self) -> &'static str {
        match self {
            MpiImpl::OpenMpi => "mpirun.openmpi",
            MpiImpl::Mpich => "mpiexec.hydra",
        }
    }

    /// The Debian packages that provide it.
    pub fn packages(self) -> &'static str {
        match self {
            MpiImpl::OpenMpi => "openmpi-bin libopenmpi-dev",
            MpiImpl::Mpich => "mpich libmpich-dev",
        }
    }
}

impl fmt::Display for MpiImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MpiImpl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openmpi" | "ompi" | "open-mpi" => Ok(MpiImpl::OpenMpi),
            "mpich" => Ok(MpiImpl::Mpich),
            _ => Err(format!("unknown MPI implementation {s:?} (openmpi, mpich)")),
        }
    }
}

/// Errors of MPI jobs. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    /// A tool of an MPI implementation is not installed.
    #[error("{tool} not found: apt-get install {packages}")]
    Missing {
        /// The program.
        tool: &'static str,
        /// Debian packages that provide it.
        packages: &'static str,
    },
    /// Compiling a C file failed.
    #[error("`{command}` failed: {stderr}")]
    Build {
        /// The command line.
        command: String,
        /// What the compiler said.
        stderr: String,
    },
    /// The test-bed failed.
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    /// An I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> MpiError {
    let context = context.into();
    move |source| MpiError::Io { context, source }
}

/// Checks that `mpi`'s compiler and launcher are installed.
pub fn require(mpi: MpiImpl) -> Result<(), MpiError> {
    for tool in [mpi.mpicc(), mpi.mpirun()] {
        if crate::find_tool(tool).is_none() {
            return Err(MpiError::Missing {
                tool,
                packages: mpi.packages(),
            });
        }
    }
    Ok(())
}

fn run_build(mut cmd: Command) -> Result<(), MpiError> {
    let command = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("cannot run `{command}`")))?;
    if !out.status.success() {
        return Err(MpiError::Build {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// Compiles the C program `source` with `mpi`'s mpicc into `out`.
pub fn compile(mpi: MpiImpl, source: &Path, out: &Path) -> Result<(), MpiError> {
    require(mpi)?;
    let mut cmd = Command::new(mpi.mpicc());
    cmd.args(["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(source)
        .arg("-o")
        .arg(out);
    run_build(cmd)
}

/// Compiles a C program of several files that we did not write (a fetched test suite) with
/// `mpi`'s mpicc into `out`: `flags` (include folders, defines) come before the sources. Its
/// warnings are its authors' to fix, so they do not fail the build.
pub fn compile_foreign(
    mpi: MpiImpl,
    flags: &[String],
    sources: &[PathBuf],
    out: &Path,
) -> Result<(), MpiError> {
    require(mpi)?;
    let mut cmd = Command::new(mpi.mpicc());
    cmd.args(["-std=gnu11", "-O0", "-w"])
        .args(flags)
        .args(sources)
        // The C library's maths, as upstream's makefiles link every test program with it.
        .arg("-lm")
        .arg("-o")
        .arg(out);
    run_build(cmd)
}

/// The repository's root (this crate lives in `tools/testbed/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tools/testbed/ has a grandparent")
        .to_path_buf()
}

/// Builds the interposer for `mpi` with `capi/mpi/build.sh` into `out_dir`, linking the Rust
/// C ABI from `capi_lib` (a `libethbcast_capi.a`), or building it in release mode if `None`.
/// Returns the path of the `.so`.
pub fn build_interposer(
    mpi: MpiImpl,
    capi_lib: Option<&Path>,
    out_dir: &Path,
) -> Result<PathBuf, MpiError> {
    require(mpi)?;
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("capi/mpi/build.sh"))
        .arg(mpi.name())
        .env("ETHBCAST_MPI_OUT", out_dir);
    if let Some(lib) = capi_lib {
        cmd.env("ETHBCAST_CAPI_LIB", lib);
    }
    run_build(cmd)?;
    Ok(out_dir.join(format!("libethbcast_mpi-{}.so", mpi.name())))
}

/// A test-bed ready for MPI: IPv4 on every `eth0` and a launch agent.
#[derive(Debug)]
pub struct MpiBed {
    bed: Testbed,
    dir: PathBuf,
    agent: PathBuf,
}

/// One MPI job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Which MPI.
    pub mpi: MpiImpl,
    /// Hosts used (the first ones of the test-bed).
    pub hosts: usize,
    /// Ranks per host (ranks 0..K-1 on the first host, and so on).
    pub ranks_per_host: usize,
    /// The program (compiled with `mpi`'s mpicc).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment of every rank.
    pub env: Vec<(String, String)>,
    /// The job is killed after this long.
    pub timeout: Duration,
}

/// What a job printed and how it ended.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// Exit status of the launcher (`None`: killed at the timeout).
    pub status: Option<ExitStatus>,
    /// Everything the ranks printed on stdout.
    pub stdout: String,
    /// Everything the ranks and the launcher printed on stderr.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
    /// The launcher's own failure that made [`MpiBed::run`] start the job again (the line it
    /// printed the last time), if it did.
    pub restarted: Option<String>,
}

impl JobOutput {
    /// Whether the launcher exited with 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

impl fmt::Display for JobOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "exit {s}")?,
            None => write!(f, "killed at the timeout")?,
        }
        write!(
            f,
            " after {:.1?}\n--- stdout\n{}--- stderr\n{}",
            self.elapsed, self.stdout, self.stderr
        )?;
        match &self.restarted {
            Some(why) => writeln!(f, "--- started again after: {why}"),
            None => Ok(()),
        }
    }
}

/// What Open MPI's launcher prints when its daemons fail to wire up on the test-bed, before
/// any rank runs (every host of the test-bed has the same host name): the only failure a job
/// is started again for.
const LAUNCHER_FAILURES: [&str; 5] = [
    "ORTE does not know how to route a message",
    "ORTE was unable to reliably start one or more daemons",
    "ORTE has lost communication with a remote daemon",
    "An ORTE daemon has unexpectedly failed after launch",
    // A daemon that could not make its session directory, before any rank started.
    "orte_session_dir failed",
];

/// How often [`MpiBed::run`] starts a job whose launcher failed, the first time included.
/// Measured on the 8-host test-bed on 2026-11-25: with 2, two of three runs of `ethbcast-bench
/// mpi --testbed 8 --impl openmpi --sizes 8,256,4096,65536` lost a job to two launcher
/// failures in a row.
pub const LAUNCHER_STARTS: usize = 3;

/// The pause before a job is started again.
const LAUNCHER_PAUSE: Duration = Duration::from_millis(500);

/// Signs that a rank ran and failed (a crash, an exit code, an abort, the interposer's own
/// error): a job that shows one is never started again, whatever else its launcher printed.
const RANK_FAILURES: [&str; 6] = [
    "exited on signal",
    "returned a non-zero exit code",
    "exited with non-zero status",
    "MPI_ABORT was invoked",
    "BAD TERMINATION",
    "ethbcast-mpi:",
];

/// The line of a failed job's output that says its launcher could not start it, if that is all
/// that went wrong: it failed within seconds, printed one of [`LAUNCHER_FAILURES`] and none
/// of [`RANK_FAILURES`]. A job killed at its timeout, or one whose ranks failed, is not a
/// start-up failure: running it again could hide a failure of ours.
fn launcher_failure(out: &JobOutput) -> Option<String> {
    let failed_soon =
        out.status.is_some_and(|s| !s.success()) && out.elapsed < Duration::from_secs(10);
    let text = || out.stdout.lines().chain(out.stderr.lines());
    if !failed_soon || text().any(|l| RANK_FAILURES.iter().any(|r| l.contains(r))) {
        return None;
    }
    text()
        .find(|l| LAUNCHER_FAILURES.iter().any(|f| l.contains(f)))
        .map(|l| l.trim().to_owned())
}

const AGENT: &str = r#"#!/bin/sh
# Remote shell for mpirun/mpiexec on the ethbcast test-bed: called as
# AGENT [ssh options] HOST command..., runs the command inside the network namespace HOST,
# with a session directory of its own (every namespace has the same host name).
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
tmp="$(dirname "$0")/tmp-$host"
mkdir -p "$tmp"
exec ip netns exec "$host" env OMPI_MCA_orte_tmpdir_base="$tmp" TMPDIR="$tmp" sh -c "$*"
"#;

impl MpiBed {
    /// Builds the test-bed, gives every host an IPv4 address and writes the agent into `dir`.
    pub fn up(config: &TestbedConfig, dir: &Path) -> Result<MpiBed, MpiError> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
        let bed = Testbed::up(config)?;
        for h in bed.hosts() {
            let out = Command::new("ip")
                .args(["-n", &h.netns, "addr", "add"])
                .arg(format!("10.77.0.{}/24", h.index + 1))
                .args(["dev", &h.iface])
                .output()
                .map_err(io_err("cannot run ip"))?;
            if !out.status.success() {
                return Err(MpiError::Build {
                    command: format!("ip -n {} addr add", h.netns),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
        }
        let agent = dir.join("netns-agent.sh");
        std::fs::write(&agent, AGENT).map_err(io_err("cannot write the agent"))?;
        let mut perms = std::fs::metadata(&agent)
            .map_err(io_err("agent"))?
            .permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&agent, perms).map_err(io_err("agent"))?;
        Ok(MpiBed {
            bed,
            dir: dir.to_path_buf(),
            agent,
        })
    }

    /// The test-bed.
    pub fn testbed(&self) -> &Testbed {
        &self.bed
    }

    /// The test-bed, to change its loss or rules between jobs.
    pub fn testbed_mut(&mut self) -> &mut Testbed {
        &mut self.bed
    }

    /// Removes the test-bed.
    pub fn down(self) -> Result<(), MpiError> {
        Ok(self.bed.down()?)
    }

    /// The launcher's command line for `job` (run inside the first host's namespace).
    pub fn command(&self, job: &Job) -> Result<Command, MpiError> {
        let hosts = &self.bed.hosts()[..job.hosts.min(self.bed.hosts().len())];
        let first = hosts.first().ok_or_else(|| {
            MpiError::Testbed(TestbedError::InvalidConfig("a job needs a host".into()))
        })?;
        let k = job.ranks_per_host.max(1);
        let np = (hosts.len() * k).to_string();
        let agent = self.agent.to_str().unwrap_or_default().to_owned();
        let mut cmd = netns::command_in(&first.netns, job.mpi.mpirun())
            .map_err(io_err(format!("namespace {}", first.netns)))?;
        match job.mpi {
            MpiImpl::OpenMpi => {
                let list: Vec<String> = hosts.iter().map(|h| format!("{}:{k}", h.netns)).collect();
                cmd.args(["--allow-run-as-root", "-np", &np, "--host", &list.join(",")])
                    .args(["--map-by", "slot", "--bind-to", "none"]);
                for (key, value) in [
                    ("plm_rsh_agent", agent.as_str()),
                    ("btl", "tcp,self"),
                    ("pml", "ob1"),
                    ("btl_tcp_if_include", IFACE),
                    ("oob_tcp_if_include", IFACE),
                    ("rtc_hwloc_vmhole", "none"),
                    ("mpi_yield_when_idle", "1"),
                ] {
                    cmd.args(["--mca", key, value]);
                }
                for (key, value) in &job.env {
                    cmd.arg("-x").arg(format!("{key}={value}"));
                }
                cmd.env("PMIX_MCA_gds", "hash")
                    .env("OMPI_MCA_orte_tmpdir_base", self.dir.join("tmp-mpirun"));
            }
            MpiImpl::Mpich => {
                let list: Vec<&str> = hosts.iter().map(|h| h.netns.as_str()).collect();
                cmd.args(["-launcher", "ssh", "-launcher-exec", &agent])
                    .args(["-hosts", &list.join(","), "-iface", IFACE])
                    .args(["-n", &np, "-ppn", &k.to_string()])
                    .args(["-genv", "UCX_NET_DEVICES", IFACE]);
                // MPICH's own traffic crosses the test-bed's switch like a cluster's, unless
                // the job chooses its transports.
                if !job.env.iter().any(|(key, _)| key == "UCX_TLS") {
                    cmd.args(["-genv", "UCX_TLS", "tcp,self"]);
                }
                for (key, value) in &job.env {
                    cmd.args(["-genv", key, value]);
                }
            }
        }
        cmd.arg(&job.program).args(&job.args);
        Ok(cmd)
    }

    /// Runs `job` to completion (or kills it at its timeout) and collects its output. A job
    /// whose launcher could not start it is started again, up to [`LAUNCHER_STARTS`] times in
    /// all and after a pause, and says so ([`JobOutput::restarted`]): Open MPI's daemons now
    /// and then fail to wire up on the test-bed ("ORTE was unable to reliably start one or
    /// more daemons"). Nothing else is run again: a rank that crashed, exited non-zero or
    /// printed an interposer error within seconds is a failure the caller sees.
    pub fn run(&self, job: &Job) -> Result<JobOutput, MpiError> {
        let mut out = self.run_once(job)?;
        let mut starts = 1;
        while starts < LAUNCHER_STARTS {
            let Some(why) = launcher_failure(&out) else {
                break;
            };
            tracing::warn!(mpi = %job.mpi, %why, "MPI job failed to start; starting it again");
            // The failed launch's daemons may still be tearing down their session directories.
            std::thread::sleep(LAUNCHER_PAUSE);
            out = self.run_once(job)?;
            out.restarted = Some(why);
            starts += 1;
        }
        Ok(out)
    }

    fn run_once(&self, job: &Job) -> Result<JobOutput, MpiError> {
        let stamp = format!("{}-{:x}", job.mpi, rand::random::<u32>());
        let out_path = self.dir.join(format!("{stamp}.out"));
        let err_path = self.dir.join(format!("{stamp}.err"));
        let stdout = std::fs::File::create(&out_path).map_err(io_err("job output"))?;
        let stderr = std::fs::File::create(&err_path).map_err(io_err("job output"))?;
        let t0 = Instant::now();
        let mut child = self
            .command(job)?
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(io_err(format!("cannot start {}", job.mpi.mpirun())))?;
        let status = loop {
            if let Some(s) = child.try_wait().map_err(io_err("waiting for the job"))? {
                break Some(s);
            }
            if t0.elapsed() > job.timeout {
                // SIGTERM first: the launcher then stops its daemons and ranks.
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let grace = Instant::now();
                while child.try_wait().ok().flatten().is_none() {
                    if grace.elapsed() > Duration::from_secs(3) {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                // Ranks left behind would spin on the next job's cores.
                let n = self.bed.end_processes();
                if n > 0 {
                    tracing::warn!(mpi = %job.mpi, processes = n, "ended what the job left running");
                }
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let output = JobOutput {
            status,
            stdout: read(&out_path),
            stderr: read(&err_path),
            elapsed: t0.elapsed(),
            restarted: None,
        };
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implementations_parse_and_name_their_tools() {
        assert_eq!("openmpi".parse::<MpiImpl>(), Ok(MpiImpl::OpenMpi));
        assert_eq!(" MPICH".parse::<MpiImpl>(), Ok(MpiImpl::Mpich));
        assert!("lam".parse::<MpiImpl>().is_err());
        assert_eq!(MpiImpl::Mpich.mpicc(), "mpicc.mpich");
        assert_eq!(MpiImpl::OpenMpi.to_string(), "openmpi");
    }

    /// A job that ended as `code` after `secs` seconds, having printed `stderr`.
    fn ended(code: i32, secs: u64, stderr: &str) -> JobOutput {
        use std::os::unix::process::ExitStatusExt;
        JobOutput {
            status: Some(ExitStatus::from_raw(code << 8)),
            stdout: String::new(),
            stderr: stderr.into(),
            elapsed: Duration::from_secs(secs),
            restarted: None,
        }
    }

    #[test]
    fn only_a_launcher_that_could_not_start_the_job_is_a_reason_to_start_it_again() {
        let route = "[h0:01234] [[5,0],0] ORTE does not know how to route a message to the specified daemon";
        assert_eq!(
            launcher_failure(&ended(1, 2, &format!("{route}\n"))).as_deref(),
            Some(route)
        );
        // The same launcher line beside a rank's failure: the rank's failure stands.
        for rank in [
            "mpirun noticed that process rank 3 with PID 77 on node h3 exited on signal 11 (Segmentation fault).",
            "Primary job  terminated normally, but 1 process returned a non-zero exit code.",
            "mpirun detected that one or more processes exited with non-zero status",
            "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
            "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
            "ethbcast-mpi: rank 2: join: timed out (no sender)",
        ] {
            let out = ended(1, 2, &format!("{rank}\n{route}\n"));
            assert_eq!(launcher_failure(&out), None, "{rank}");
        }
        // A quick failure that names no launcher trouble, a slow one, a success, a timeout.
        assert_eq!(launcher_failure(&ended(1, 2, "something else\n")), None);
        assert_eq!(launcher_failure(&ended(1, 30, route)), None);
        assert_eq!(launcher_failure(&ended(0, 2, route)), None);
        let mut killed = ended(1, 2, route);
        killed.status = None;
        assert_eq!(launcher_failure(&killed), None);
    }
}
