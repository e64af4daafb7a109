//! The receiving side: join, write the stream as it arrives, verify, commit or discard.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ethbcast::link;
use ethbcast::node::Node;
use ethbcast::proto::{Config, Event};
use serde::Serialize;

use super::stream::{hex, Final, Msg, ABORT, EVICTED};
use super::{Fatal, LinkOpts, EXIT_FAILED, EXIT_INTERRUPTED};

/// Where the stream goes.
#[derive(Debug, Clone)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// A file, written under a temporary name and renamed after the digest matched.
    File(PathBuf),
    /// The standard input of `sh -c COMMAND`.
    Command(String),
}

/// What `ethbcast recv` was asked to do.
#[derive(Debug, Clone)]
pub struct RecvArgs {
    /// Interface, group, backend.
    pub link: LinkOpts,
    /// Output.
    pub output: Output,
    /// Give up after this long without a frame from the sender.
    pub timeout: Duration,
    /// How long to wait for a sender's roster.
    pub wait: Duration,
    /// No chatter on stderr.
    pub quiet: bool,
}

/// A receiver's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    /// Completed and verified.
    pub ok: bool,
    /// Rank in the transfer.
    pub rank: u16,
    /// Bytes received.
    pub bytes: u64,
    /// Seconds from the header to the end.
    pub seconds: f64,
    /// BLAKE3 of what was received (hex).
    pub digest: String,
    /// Why it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Exit code.
    pub code: u8,
}

enum Sink {
    Stdout(BufWriter<std::io::Stdout>),
    File {
        tmp: PathBuf,
        dst: PathBuf,
        f: Option<BufWriter<File>>,
    },
    Command {
        cmd: String,
        child: Option<Child>,
        stdin: Option<BufWriter<ChildStdin>>,
    },
    Done,
}

fn temp_name(dst: &Path) -> Result<PathBuf, Fatal> {
    let name = dst
        .file_name()
        .ok_or_else(|| Fatal::io(format!("-o {}: not a file name", dst.display())))?;
    let dir = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(dir.join(format!(
        ".{}.ethbcast-{}.part",
        name.to_string_lossy(),
        std::process::id()
    )))
}

fn write_err(what: &str, e: std::io::Error) -> Fatal {
    if e.kind() == ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
        Fatal::io(format!("disk full writing {what}"))
    } else if e.kind() == ErrorKind::BrokenPipe {
        Fatal::new(
            EXIT_FAILED,
            format!("{what} closed its input before the end of the stream"),
        )
    } else {
        Fatal::io(format!("writing {what}: {e}"))
    }
}

impl Sink {
    fn open(out: &Output) -> Result<Sink, Fatal> {
        Ok(match out {
            Output::Stdout => Sink::Stdout(BufWriter::with_capacity(1 << 20, std::io::stdout())),
            Output::File(dst) => {
                if dst.is_dir() {
                    return Err(Fatal::io(format!(
                        "-o {} is a directory: give a file name",
                        dst.display()
                    )));
                }
                let tmp = temp_name(dst)?;
                let f = File::create(&tmp)
                    .map_err(|e| Fatal::io(format!("cannot create {}: {e}", tmp.display())))?;
                Sink::File {
                    tmp,
                    dst: dst.clone(),
                    f: Some(BufWriter::with_capacity(1 << 20, f)),
                }
            }
            Output::Command(cmd) => Sink::Command {
                cmd: cmd.clone(),
                child: None,
                stdin: None,
            },
        })
    }

    /// Starts the command (at the header, so that no command runs for a transfer that never
    /// begins).
    fn start(&mut self) -> Result<(), Fatal> {
        if let Sink::Command { cmd, child, stdin } = self {
            if child.is_none() {
                let mut c = Command::new("sh")
                    .arg("-c")
                    .arg(&*cmd)
                    .stdin(Stdio::piped())
                    .spawn()
                    .map_err(|e| Fatal::io(format!("cannot run sh -c {cmd:?}: {e}")))?;
                *stdin = c.stdin.take().map(|s| BufWriter::with_capacity(1 << 20, s));
                *child = Some(c);
            }
        }
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> Result<(), Fatal> {
        match self {
            Sink::Stdout(w) => w.write_all(data).map_err(|e| write_err("stdout", e)),
            Sink::File { tmp, f, .. } => f
                .as_mut()
                .expect("open file")
                .write_all(data)
                .map_err(|e| write_err(&tmp.display().to_string(), e)),
            Sink::Command { cmd, stdin, .. } => stdin
                .as_mut()
                .expect("command started at the header")
                .write_all(data)
                .map_err(|e| write_err(&format!("command {cmd:?}"), e)),
            Sink::Done => Ok(()),
        }
    }

    /// Makes the output final: flush, fsync and rename; or close the command's input and
    /// check its exit status.
    fn commit(&mut self) -> Result<(), Fatal> {
        match std::mem::replace(self, Sink::Done) {
            Sink::Stdout(mut w) => w.flush().map_err(|e| write_err("stdout", e)),
            Sink::File { tmp, dst, f } => {
                let r = (|| {
                    let w = f.expect("open file");
                    let file = w
                        .into_inner()
                        .map_err(|e| write_err(&tmp.display().to_string(), e.into_error()))?;
                    file.sync_all()
                        .map_err(|e| write_err(&tmp.display().to_string(), e))?;
                    std::fs::rename(&tmp, &dst).map_err(|e| {
                        Fatal::io(format!(
                            "cannot rename {} to {}: {e}",
                            tmp.display(),
                            dst.display()
                        ))
                    })
                })();
                if r.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                r
            }
            Sink::Command { cmd, child, stdin } => {
                let Some(mut child) = child else {
                    return Ok(());
                };
                let flushed = match stdin {
                    Some(mut w) => w
                        .flush()
                        .map_err(|e| write_err(&format!("command {cmd:?}"), e)),
                    None => Ok(()),
                }; // dropping the writer closes the pipe
                let status = child
                    .wait()
                    .map_err(|e| Fatal::io(format!("waiting for {cmd:?}: {e}")))?;
                flushed?;
                if status.success() {
                    Ok(())
                } else {
                    Err(Fatal::new(
                        EXIT_FAILED,
                        format!("command {cmd:?} failed: {status}"),
                    ))
                }
            }
            Sink::Done => Ok(()),
        }
    }

    /// Discards the output: removes the temporary file, kills the command.
    fn abort(&mut self) {
        match std::mem::replace(self, Sink::Done) {
            Sink::File { tmp, f, .. } => {
                drop(f);
                let _ = std::fs::remove_file(&tmp);
            }
            Sink::Command { child, stdin, .. } => {
                drop(stdin);
                if let Some(mut c) = child {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            Sink::Stdout(mut w) => {
                let _ = w.flush();
            }
            Sink::Done => {}
        }
    }
}

/// Discards an output that was not committed, whatever way `run` leaves.
struct Guard(Sink);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `ethbcast recv`. Returns the report (its `code` is the exit code) or a fatal error
/// that happened before the transfer began.
pub fn run(a: &RecvArgs) -> Result<RecvReport, Fatal> {
    let stop = super::interrupt_flag();
    let mut guard = Guard(Sink::open(&a.output)?);
    let sink = &mut guard.0;
    let mut lnk = link::open_sized(
        a.link.backend,
        &a.link.iface,
        a.link.wait_mode,
        a.link.window,
    )?;
    let me = lnk.local_mac();
    if !a.quiet {
        eprintln!(
            "ethbcast: {} ({}) waiting for a sender, group {:#x}",
            a.link.iface,
            link::format_mac(&me),
            a.link.group_id
        );
    }
    let roster = super::join::hello(
        lnk.as_mut(),
        a.link.group_id,
        Instant::now() + a.wait,
        &stop,
    )?;
    let rank = roster
        .iter()
        .position(|m| *m == me)
        .expect("the roster names us") as u16;
    let mut cfg = Config::new(a.link.group_id, rank, roster.len() as u16);
    cfg.window = a.link.window;
    cfg.ack_every = a.link.ack_every;
    cfg.auto_post = true;
    let mut node = Node::new(cfg, lnk, roster)?;
    node.send_to(0, b"J".to_vec())?;

    let start = Instant::now();
    let mut hasher = blake3::Hasher::new();
    let mut bytes: u64 = 0;
    let mut header = false;
    let mut last_rx = (node.stats().frames_received, Instant::now());
    let outcome: Result<(), Fatal> = 'run: loop {
        if stop.load(Ordering::SeqCst) {
            break 'run Err(Fatal::new(EXIT_INTERRUPTED, "interrupted"));
        }
        if let Err(e) = node.poll(Duration::from_millis(20)) {
            break 'run Err(e.into());
        }
        let now = Instant::now();
        let fr = node.stats().frames_received;
        if fr != last_rx.0 {
            last_rx = (fr, now);
        } else if now.duration_since(last_rx.1) > a.timeout {
            break 'run Err(Fatal::new(
                EXIT_FAILED,
                format!(
                    "nothing heard from the sender for {:.0} s: giving up",
                    a.timeout.as_secs_f64()
                ),
            ));
        }
        let events: Vec<Event> = node.take_events().collect();
        for ev in events {
            match ev {
                Event::Delivered { root: 0, data, .. } => match Msg::decode(data) {
                    Ok(Msg::Header { total, .. }) => {
                        header = true;
                        if !a.quiet {
                            eprintln!(
                                "ethbcast: rank {rank}: receiving {}",
                                total.map_or("a stream".into(), |t| format!("{t} bytes"))
                            );
                        }
                        if let Err(e) = sink.start() {
                            break 'run Err(e);
                        }
                    }
                    Ok(Msg::Data(d)) if header => {
                        hasher.update(&d);
                        bytes += d.len() as u64;
                        if let Err(e) = sink.write(&d) {
                            break 'run Err(e);
                        }
                    }
                    Ok(Msg::Trailer { bytes: b, digest }) if header => {
                        let mine = *hasher.finalize().as_bytes();
                        if b != bytes || mine != digest {
                            break 'run Err(Fatal::new(
                                EXIT_FAILED,
                                format!(
                                    "integrity check failed: got {bytes} bytes blake3:{}, the sender sent {b} bytes blake3:{}",
                                    hex(&mine),
                                    hex(&digest)
                                ),
                            ));
                        }
                        break 'run sink.commit();
                    }
                    Ok(Msg::Abort(why)) => {
                        break 'run Err(Fatal::new(
                            EXIT_INTERRUPTED,
                            format!("the sender aborted the transfer ({why})"),
                        ))
                    }
                    Ok(_) => {
                        break 'run Err(Fatal::new(EXIT_FAILED, "stream data before its header"))
                    }
                    Err(e) => break 'run Err(Fatal::new(EXIT_FAILED, e)),
                },
                Event::Control {
                    src: 0, payload, ..
                } => {
                    if payload.starts_with(ABORT) {
                        break 'run Err(Fatal::new(
                            EXIT_INTERRUPTED,
                            "the sender aborted the transfer",
                        ));
                    }
                    if payload.starts_with(EVICTED) {
                        break 'run Err(Fatal::new(
                            EXIT_FAILED,
                            "evicted by the sender (this receiver was too slow or silent)",
                        ));
                    }
                }
                _ => {}
            }
        }
    };
    let (ok, error, code) = match &outcome {
        Ok(()) => (true, String::new(), super::EXIT_OK),
        Err(f) => {
            sink.abort();
            (false, f.msg.clone(), f.code)
        }
    };
    let digest = hex(hasher.finalize().as_bytes());
    // Tell the sender (best effort for failures), then make sure it heard us.
    let report = Final {
        ok,
        bytes,
        error: error.clone(),
    };
    if node.send_to(0, report.encode()).is_ok() {
        let patience = if ok {
            Duration::from_secs(3)
        } else {
            Duration::from_millis(500)
        };
        let _ = node.wait_idle(patience);
    }
    Ok(RecvReport {
        ok,
        rank,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
        digest,
        error,
        code,
    })
}
