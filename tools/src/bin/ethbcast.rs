//! `ethbcast`: distribute a file or a stream to many hosts at line rate, over the switch's
//! hardware broadcast. See [`ethbcast_tools::distribute`] for the protocol and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::CommandFactory;
use clap::{Args, Parser, Subcommand};
use ethbcast::StreamOptions;
use ethbcast::{Backend, WaitMode};
use ethbcast_tools::distribute::{
    self, recv, send, send::Expect, Fatal, LinkOptions, DEFAULT_GROUP_ID,
};
use ethbcast_tools::testbed::units::{self, parse_duration};
use ethbcast_tools::transfer::DigestAlgo;

const EXIT_CODES: &str = "\
Exit codes:
  0    every receiver completed (recv: this receiver completed)
  1    some receiver failed or was evicted (recv: the transfer failed here)
  2    usage error
  3    join timeout: not all receivers joined within --wait
  4    I/O or permission error (interface, CAP_NET_RAW, input file, disk full)
  130  interrupted (Ctrl-C / SIGTERM, or the sender aborted)";

const EXAMPLES: &str = "\
Examples:
  # once: a group key, copied to every host (mode 0600)
  ethbcast keygen /etc/ethbcast/group.key
  # on 8 receivers:
  ethbcast recv --iface eth0 --key-file /etc/ethbcast/group.key -o /data/image.raw
  # on the sender:
  ethbcast send --iface eth0 --key-file /etc/ethbcast/group.key -i image.raw --receivers 8

  # a directory tree, unpacked into /opt/app (new or empty) on every receiver
  # (ETHBCAST_KEY_FILE stands for --key-file; --user drops root's rights for the output):
  export ETHBCAST_KEY_FILE=/etc/ethbcast/group.key
  ethbcast recv --iface eth0 --user deploy --extract /opt/app
  ethbcast send --iface eth0 -i /src/app --receivers 8
  # a stream of unknown length, into a command:
  ethbcast recv --iface eth0 -O 'tar -x -C /opt'
  tar -c -C /src . | ethbcast send --iface eth0 --receivers 8 --max-rate 500mbit

  # exactly the hosts of a hostfile (a host name and its MAC per line), JSON report:
  ethbcast send --iface eth0 -i data.bin --hostfile hosts.txt --json > report.json

  # start once 7 of the hostfile's 8 hosts joined and 30 s passed; the report names the 8th:
  ethbcast send --iface eth0 -i data.bin --hostfile hosts.txt --min-receivers 7 --max-wait 30s --json > report.json
  # receivers that keep what arrived of a transfer that fails, to resume it:
  ethbcast recv --iface eth0 --resume -o /data/data.bin
  # again to the hosts the report lists as failed or missing, each from where it stopped:
  ethbcast send --iface eth0 -i data.bin --only-failed report.json";

#[derive(Parser)]
#[command(
    name = "ethbcast",
    version,
    about = "Distribute a file or a stream to many hosts at once over raw Ethernet broadcast, reliably",
    long_about = "Distribute a file or a stream to many hosts at once over raw Ethernet \
                  broadcast (EtherType 0x88B5), reliably: lost frames are repaired, the \
                  whole stream is checked with a digest, and dead or stalled receivers are \
                  evicted so that the others finish. Needs root or CAP_NET_RAW.",
    after_help = format!("{EXAMPLES}\n\n{EXIT_CODES}")
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    log: ethbcast_tools::logging::Verbosity,
}

#[derive(Args, Clone)]
struct Common {
    /// Network interface (all hosts on one Ethernet segment).
    #[arg(long)]
    iface: String,
    /// Group id: transfers with different ids on one segment ignore each other.
    #[arg(long, default_value_t = DEFAULT_GROUP_ID, value_parser = parse_group)]
    group_id: u32,
    /// Link backend: ring (mmap rings), socket, pnet or xdp (AF_XDP).
    #[arg(long, default_value = "ring")]
    backend: Backend,
    /// How to wait for frames: adaptive (spin briefly, then block), patient (spin up to 2 ms,
    /// then block), block, spin, or doze (check every millisecond and take what arrived as one
    /// batch). Default: adaptive on the sender, doze
    /// on receivers, where a wake-up or a yield per frame costs more than the frame itself
    /// when hosts have more busy processes than cores.
    #[arg(long)]
    wait_mode: Option<WaitMode>,
    /// Retransmission buffer slots = frames in flight (both sides must agree).
    #[arg(long, default_value_t = distribute::DEFAULT_WINDOW, value_parser = parse_window)]
    window: usize,
    /// A receiver acknowledges every this many frames (and at message ends and after a short
    /// delay): fewer acknowledgements cost the sender and the switch less per data frame.
    #[arg(long, default_value_t = distribute::DEFAULT_ACK_EVERY)]
    ack_every: usize,
    /// On a receiver: gather the gaps found in this many frames into one request for repair
    /// (at most half the window; 0: ask at once). Default: a quarter of the window, so that
    /// under steady loss a receiver sends one request for several lost frames.
    #[arg(long)]
    nack_gather: Option<usize>,
    /// On a receiver: ask only the sender for lost frames. By default a receiver asks a fellow
    /// receiver first (peer repair), which keeps repairs off the sender's link. No effect on
    /// the sender.
    #[arg(long)]
    no_peer_repair: bool,
    /// Group key file, the same on every host, readable by its owner only (`ethbcast keygen
    /// FILE` writes one): the join and every frame of the transfer are authenticated, so a
    /// host without the key can neither join, inject data, abort, evict nor report. Required
    /// unless --insecure.
    #[arg(long, env = "ETHBCAST_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// With a key, authenticate frames without encrypting them: the data then crosses the
    /// segment in the clear. By default every frame of a keyed transfer is encrypted
    /// (AES-256-GCM); this is for measuring what that costs (docs/security.md).
    #[arg(long)]
    no_encrypt: bool,
    /// Run without a group key: any host of the segment can then join, inject data, abort,
    /// and answer a receiver as its sender, whose data (and digest) the receiver takes (see
    /// docs/security.md, "Threat model"). Pin the sender with `recv --from`.
    #[arg(long, conflicts_with = "key_file")]
    insecure: bool,
    /// Where broadcasts go: derived (the group's own multicast address, 03:eb: and the group
    /// id, so hosts outside the transfer never see its frames), broadcast (every host of the
    /// segment; for switches or NICs that mishandle multicast), or a multicast MAC.
    #[arg(long, default_value = "derived")]
    group_address: ethbcast::GroupAddress,
}

fn parse_group(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?}: {e}"))
}

/// Checked here, so that a bad window fails at once instead of after the join.
fn parse_window(s: &str) -> Result<usize, String> {
    let max = ethbcast::MAX_WINDOW;
    match s.trim().parse::<usize>() {
        Ok(w) if (1..=max).contains(&w) => Ok(w),
        _ => Err(format!("{s:?}: the window must be 1..={max} frames")),
    }
}

fn parse_mac(s: &str) -> Result<ethbcast::MacAddr, String> {
    ethbcast::parse_mac(s.trim())
        .ok_or_else(|| format!("{s:?}: not a MAC address (such as 02:00:00:00:00:01)"))
}

/// `recv --max-bytes`: `None` is no limit (clap cannot hold an `Option` as a value).
#[derive(Debug, Clone, Copy)]
struct MaxBytes(Option<u64>);

fn parse_max_bytes(s: &str) -> Result<MaxBytes, String> {
    if s.trim().eq_ignore_ascii_case("inf") {
        return Ok(MaxBytes(None));
    }
    units::parse_size(s)
        .map(|n| MaxBytes(Some(n)))
        .map_err(|e| e.to_string())
}

/// `send --chunk`: 1 KiB to 64 MiB.
fn parse_chunk(s: &str) -> Result<usize, String> {
    let v = units::parse_size(s).map_err(|e| e.to_string())?;
    if !(1024..=64 << 20).contains(&v) {
        return Err("chunk must be 1 KiB..64 MiB".into());
    }
    Ok(v as usize)
}

/// `send --max-rate` in bytes per second, at least 1000.
fn parse_max_rate(s: &str) -> Result<u64, String> {
    let bytes = units::parse_rate(s).map_err(|e| e.to_string())? / 8;
    if bytes < 1000 {
        return Err("a rate must be at least 1000 B/s (8kbit)".into());
    }
    Ok(bytes)
}

#[derive(Subcommand)]
enum Cmd {
    /// Send a file or a directory (-i) or standard input to the receivers.
    #[command(after_help = format!("{EXAMPLES}\n\n{EXIT_CODES}"))]
    Send(SendCmd),
    /// Receive one transfer: to stdout (default), a file (-o), a command's stdin (-O), or a
    /// directory (-x, a tree).
    #[command(after_help = format!("{EXAMPLES}\n\n{EXIT_CODES}"))]
    Recv(RecvCmd),
    /// Check this host before a transfer: the interface (exists, up, Ethernet, MTU), the
    /// capabilities, net.core.rmem_max, ETHBCAST_BACKEND, and opening the link; with
    /// --hostfile, every host of the file too (run `ethbcast doctor --listen` on those). One
    /// line per check with its fix; exit 1 if any check fails.
    #[command(after_help = "\
Examples:
  # on every receiver, while the sender checks (Ctrl-C to stop):
  ethbcast doctor --iface eth0 --listen
  # on the sender: this host, then whether a broadcast, a full-sized frame and the group's
  # multicast address reach each host of the hostfile, and each host's MTU:
  ethbcast doctor --iface eth0 --hostfile hosts.txt")]
    Doctor(DoctorCmd),
    /// Write a fresh random group key to FILE (mode 0600; an existing file is not overwritten),
    /// to copy to every host and pass as --key-file.
    Keygen {
        /// The key file to create.
        file: PathBuf,
        /// Read a passphrase (one line) from standard input and write it with a fresh random
        /// salt instead: the key is then stretched from it with Argon2id on every host. A
        /// random key is stronger; a passphrase file is for hosts where one is typed.
        #[arg(long)]
        passphrase: bool,
    },
    /// Write the man pages and shell completions into a directory (for packaging; see
    /// `ethbcast_tools::packaging`).
    #[command(hide = true)]
    GenerateAssets {
        /// Directory to write into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

/// `ethbcast send`'s options.
#[derive(Args)]
struct SendCmd {
    #[command(flatten)]
    common: Common,
    /// Input file (default: standard input, read until EOF), or a directory: sent as a tree
    /// (a tar stream packed as it is sent: regular files, directories, symbolic links as
    /// links, permission bits and times; not owners, sockets, named pipes or devices; hard
    /// links as separate files), for `recv --extract DIR` (or `-O 'tar -x'`).
    #[arg(short = 'i', long = "input")]
    input: Option<PathBuf>,
    /// Wait for this many receivers.
    #[arg(
        long,
        required_unless_present_any = ["hostfile", "only_failed"],
        conflicts_with = "hostfile"
    )]
    receivers: Option<usize>,
    /// Wait for exactly the hosts of this file (one MAC per line, optionally with the host's
    /// name, which the report shows; `#` comments).
    #[arg(long)]
    hostfile: Option<PathBuf>,
    /// Wait for exactly the receivers that a previous `send --json` report (this file)
    /// lists as not completed or not joined, and send to them alone.
    #[arg(long, conflicts_with_all = ["receivers", "hostfile"])]
    only_failed: Option<PathBuf>,
    /// Start without some receivers: once at least this many have joined and --max-wait
    /// has passed; the report names those that did not join (exit 1 then).
    #[arg(long, requires = "max_wait")]
    min_receivers: Option<usize>,
    /// With --min-receivers: how long to wait for all receivers (e.g. 2s, 30).
    #[arg(long, requires = "min_receivers", value_parser = parse_duration)]
    max_wait: Option<Duration>,
    /// Sender-side token bucket: 500mbit, 1gbit, 50MB/s, 20MiB/s. Default: paced only
    /// by the shared buffer (at most --window frames unacknowledged).
    #[arg(long, value_parser = parse_max_rate)]
    max_rate: Option<u64>,
    /// End-to-end digest every receiver checks: xxh3 (XXH3-128, fast) or blake3
    /// (cryptographic, about 6% slower on a busy 8-receiver host).
    #[arg(long, value_enum, default_value = "xxh3")]
    digest: DigestAlgo,
    /// Bytes per broadcast message (e.g. 1M, 256KiB, 1MB; K, M are binary, KB, MB decimal).
    #[arg(long, default_value = "1M", value_parser = parse_chunk)]
    chunk: usize,
    /// Seconds to wait for the receivers to join (exit 3 if they don't), e.g. 60, 2.5, 500ms,
    /// 2m; inf: no limit.
    #[arg(long, default_value = "60", value_parser = parse_duration)]
    wait: Duration,
    /// Evict a receiver whose cursor has not moved and that was silent this many
    /// seconds while it had data outstanding, and fail one that acknowledged all data
    /// but showed no progress towards its report (its output taking data) for as long;
    /// inf: never.
    #[arg(long, default_value = "3", value_parser = parse_duration)]
    timeout: Duration,
    /// Seconds to wait for completion reports once all data is acknowledged (an -O
    /// command may need time to finish); inf: no limit.
    #[arg(long, default_value = "60", value_parser = parse_duration)]
    report_wait: Duration,
    /// No progress bar or messages (the REPORT and warnings are still printed to stderr).
    #[arg(long)]
    quiet: bool,
    /// Print the final report as JSON on stdout, with each receiver's counters (stream
    /// bytes received and kept from a partial file, bytes its output took, repairs asked of
    /// the sender and of fellow receivers, repairs served, acknowledgements, duplicates).
    #[arg(long)]
    json: bool,
    /// Write the transfer's state and counters as JSON to this file every second and at the
    /// end (each time whole: a temporary file renamed over it), for monitoring.
    #[arg(long, value_name = "PATH")]
    status_file: Option<PathBuf>,
}

/// `ethbcast recv`'s options.
#[derive(Args)]
struct RecvCmd {
    #[command(flatten)]
    common: Common,
    /// Output file, written as a temporary file and renamed once the digest matched (a device
    /// or a named pipe, such as /dev/null, is written in place).
    #[arg(short = 'o', long = "output", conflicts_with_all = ["command", "extract"])]
    output: Option<PathBuf>,
    /// Pipe the stream into `sh -c COMMAND` (its exit status counts).
    #[arg(short = 'O', long = "command", conflicts_with = "extract")]
    command: Option<String>,
    /// Unpack a tree (`send -i DIR`, or any tar stream) into the directory DIR, which must
    /// not exist or be empty: regular files, directories and symbolic links, with their
    /// permission bits (not set-user/group-ID) and times, owned by this user. It is unpacked
    /// into a fresh directory next to DIR, renamed to DIR once the digest matched, and removed
    /// if anything fails. An entry that would land outside DIR (an absolute name, `..`, a
    /// symbolic link that leads out, a hard link out, a path through a symbolic link), a
    /// device or a named pipe fails the receiver, naming the entry. A tree is always received
    /// whole (no --resume).
    #[arg(short = 'x', long = "extract", value_name = "DIR")]
    extract: Option<PathBuf>,
    /// With -o FILE: write under the fixed name .FILE.ethbcast.part next to FILE, and keep
    /// it when the transfer does not complete (interrupted, evicted, the sender gone). The
    /// next `recv --resume -o FILE` offers what it holds to the sender: the sender reads its
    /// input file and, if the bytes' digest matches, starts its broadcast at the smallest
    /// offset every receiver holds (at 0 if a receiver holds nothing or other bytes;
    /// after `send --only-failed`, where the failed receivers stopped). The whole file's
    /// digest is checked before it is renamed into place; one that does not match is
    /// removed. Resuming needs the sender's input to be a file (-i), not a stream or a
    /// directory; a tree (--extract) is always received whole.
    #[arg(long, requires = "output", conflicts_with = "extract")]
    resume: bool,
    /// With -o FILE: never replace an existing FILE (refused at the start; a FILE that
    /// appears during the transfer is kept and the data received discarded). Without it an
    /// existing FILE is replaced once the new one is complete.
    #[arg(long, requires = "output")]
    no_clobber: bool,
    /// Give up after this many seconds without any frame from the sender, or without the
    /// output (file, stdout, -O command) taking any data; inf: never.
    #[arg(long, default_value = "30", value_parser = parse_duration)]
    timeout: Duration,
    /// Seconds to wait for a sender to start (exit 3 if none does); inf: no limit.
    #[arg(long, default_value = "3600", value_parser = parse_duration)]
    wait: Duration,
    /// Take the transfer only from the sender with this MAC (its roster alone). Without a
    /// key a MAC can be forged: this keeps out other senders by mistake, not by attack.
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    from: Option<ethbcast::MacAddr>,
    /// Once the link is open, run as this user (its groups too): the output file and the
    /// -O command get that user's rights, not root's. Needs root (or CAP_SETUID and
    /// CAP_SETGID).
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// Refuse a stream larger than this (e.g. 500M, 64GiB, 500MB; K, M, G, T are binary, KB,
    /// MB, GB, TB decimal): at its header when it announces its size, else as soon as its data passes the limit; the output is
    /// then discarded (exit 1). A stream is refused in any case when its data runs past the
    /// size it announced. inf: no limit.
    #[arg(long, default_value = "inf", value_parser = parse_max_bytes)]
    max_bytes: MaxBytes,
    /// No messages on stderr but warnings (RUST_LOG=error hides those too).
    #[arg(long)]
    quiet: bool,
    /// Print the outcome as JSON on stderr (stdout may carry the data), with the counters.
    #[arg(long)]
    json: bool,
    /// Write this receiver's state and counters as JSON to this file every second and at
    /// the end (each time whole: a temporary file renamed over it), for monitoring.
    #[arg(long, value_name = "PATH")]
    status_file: Option<PathBuf>,
}

/// `ethbcast doctor`'s options.
#[derive(Args)]
struct DoctorCmd {
    /// Network interface.
    #[arg(long)]
    iface: String,
    /// Link backend to check: ring, socket, pnet or xdp.
    #[arg(long, default_value = "ring")]
    backend: Backend,
    /// Also probe the hosts of this file (as `send --hostfile` reads it), each running
    /// `ethbcast doctor --listen`: one line per host and check (a broadcast reaches it;
    /// its MTU against this host's, and whether a frame of this host's MTU reaches it; the
    /// group's multicast address reaches it).
    #[arg(long, conflicts_with = "listen")]
    hostfile: Option<PathBuf>,
    /// How long to probe the hosts of --hostfile (less when all answered), e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    probe_wait: Duration,
    /// After this host's checks (exit 1 if one fails), answer the probes of `ethbcast
    /// doctor --hostfile` run on another host, until Ctrl-C or SIGTERM.
    #[arg(long)]
    listen: bool,
    /// The group id whose multicast address is probed (as given to send and recv).
    #[arg(long, default_value_t = DEFAULT_GROUP_ID, value_parser = parse_group)]
    group_id: u32,
    /// The group address probed: derived, broadcast or a multicast MAC (as given to send and
    /// recv).
    #[arg(long, default_value = "derived")]
    group_address: ethbcast::GroupAddress,
    /// Print the checks as JSON on stdout: one object per line of the text output, with the
    /// check's id, its host (`local`, or the hostfile's), its status, what was found and the
    /// fix.
    #[arg(long)]
    json: bool,
    /// Group key file (as given to send and recv): checked as send and recv read it
    /// (readable, mode 0600, owned by this user or root, well formed); probes and answers then
    /// carry keyed tags, so a listener answers only probes of this key, the prober takes only
    /// answers of it, and each host of --hostfile is checked to hold the same key.
    #[arg(long, env = "ETHBCAST_KEY_FILE")]
    key_file: Option<PathBuf>,
}

fn link_opts(c: &Common, default_wait: WaitMode) -> Result<LinkOptions, Fatal> {
    let mut stream = StreamOptions {
        group_id: c.group_id,
        backend: c.backend,
        wait: c.wait_mode.unwrap_or(default_wait),
        window: c.window,
        ack_every: c.ack_every,
        nack_gather: c.nack_gather.unwrap_or(c.window / 4),
        peer_repair: !c.no_peer_repair,
        group_address: c.group_address,
        ..StreamOptions::default()
    };
    // Refused here with the engine's own check, not at the join: a receiver would wait for a
    // sender first. Before the key file is read: a usage error is one whatever the file.
    stream
        .check()
        .map_err(|e| Fatal::new(distribute::EXIT_USAGE, format!("invalid options: {e}")))?;
    stream.key = match (&c.key_file, c.insecure) {
        (Some(p), _) => Some(distribute::read_key_file(p, c.group_id)?),
        (None, true) => None,
        (None, false) => return Err(distribute::no_key_error()),
    };
    stream.insecure = c.insecure;
    stream.encrypt = !c.no_encrypt;
    Ok(LinkOptions {
        iface: c.iface.clone(),
        stream,
    })
}

fn fail(f: Fatal) -> ExitCode {
    eprintln!("ethbcast: error: {f}");
    ExitCode::from(f.code)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init();
    // Both sides allocate and free one buffer per chunk (a megabyte by default): reused from
    // the heap, not mapped, faulted in and zeroed afresh each time. Measured on 8 receivers of
    // 256 MiB: 15.4 CPU s/GiB with it, 16.6 without.
    ethbcast_sys::alloc::keep_freed_memory(ethbcast_sys::alloc::MAX_KEPT_BLOCK);
    let done = match cli.cmd {
        Cmd::Send(c) => send_cmd(c),
        Cmd::Recv(c) => recv_cmd(c),
        Cmd::Doctor(c) => doctor_cmd(c),
        Cmd::Keygen { file, passphrase } => keygen(&file, passphrase),
        Cmd::GenerateAssets { out } => {
            match ethbcast_tools::packaging::generate(Cli::command(), &out) {
                Ok(files) => {
                    for f in files {
                        println!("{}", f.display());
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(Fatal::io(format!("cannot write to {}: {e}", out.display()))),
            }
        }
    };
    done.unwrap_or_else(fail)
}

/// Whom `send` waits for: `--receivers N`, the hosts of `--hostfile`, or those a report of
/// `--only-failed` lists.
fn expect(c: &SendCmd) -> Result<Expect, Fatal> {
    let p = match (c.receivers, c.hostfile.as_ref().or(c.only_failed.as_ref())) {
        (Some(0), _) => {
            return Err(Fatal::new(
                distribute::EXIT_USAGE,
                "--receivers must be at least 1",
            ))
        }
        (Some(n), _) => return Ok(Expect::Count(n)),
        (None, Some(p)) => p,
        (None, None) => unreachable!("clap requires one"),
    };
    let text = std::fs::read_to_string(p)
        .map_err(|e| Fatal::io(format!("cannot read {}: {e}", p.display())))?;
    let expect = match &c.only_failed {
        Some(_) => {
            send::failed_hosts(&text).map_err(|e| format!("--only-failed {}: {e}", p.display()))
        }
        None => ethbcast::parse_hostfile(&text)
            .map(Expect::List)
            .map_err(|e| e.to_string()),
    };
    let expect = expect.map_err(|e| Fatal::new(distribute::EXIT_USAGE, e))?;
    if let (Some(p), Expect::Count(n)) = (&c.only_failed, &expect) {
        eprintln!(
            "ethbcast: --only-failed {}: the report names no host for some receivers (a report of --receivers): waiting for the first {n} receivers",
            p.display()
        );
    }
    Ok(expect)
}

/// `ethbcast send`.
fn send_cmd(c: SendCmd) -> Result<ExitCode, Fatal> {
    let expect = expect(&c)?;
    let settle = match (c.min_receivers, c.max_wait) {
        (Some(min), Some(after)) if (1..=expect.len()).contains(&min) => {
            Some(ethbcast::Settle { min, after })
        }
        (Some(min), Some(_)) => {
            return Err(Fatal::new(
                distribute::EXIT_USAGE,
                format!(
                    "--min-receivers {min}: must be 1..={} (the receivers expected)",
                    expect.len()
                ),
            ))
        }
        _ => None,
    };
    let link = link_opts(&c.common, WaitMode::Adaptive)?;
    if c.common.insecure && !c.quiet {
        eprintln!("{}", distribute::INSECURE_WARNING);
    }
    let args = send::SendArgs {
        link,
        input: c.input,
        expect,
        settle,
        digest: c.digest,
        max_rate: c.max_rate,
        chunk: c.chunk,
        wait: c.wait,
        timeout: c.timeout,
        report_wait: c.report_wait,
        quiet: c.quiet,
        status_file: c.status_file,
    };
    let r = send::run(&args);
    match &r.error {
        // Nothing was sent: the error says what there is to say.
        Some(e) if r.data_frames == 0 => {
            eprintln!("ethbcast: error: {e}")
        }
        Some(e) => eprintln!("{}ethbcast: error: {e}", r.render()),
        None => eprint!("{}", r.render()),
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("report serialises")
        );
    }
    Ok(ExitCode::from(r.code))
}

/// `ethbcast recv`.
fn recv_cmd(c: RecvCmd) -> Result<ExitCode, Fatal> {
    let out = match (c.output, c.command, c.extract.clone()) {
        (Some(p), _, _) => recv::Output::File(p),
        (None, Some(c), _) => recv::Output::Command(c),
        (None, None, Some(d)) => recv::Output::Tree(d),
        (None, None, None) => recv::Output::Stdout,
    };
    let mut link = link_opts(&c.common, WaitMode::Doze)?;
    link.stream.root = c.from;
    if c.common.insecure && !c.quiet {
        eprintln!("{}", distribute::INSECURE_WARNING);
        if c.from.is_none() {
            eprintln!("ethbcast: warning: and without --from, any host that answers first is taken as the sender");
        }
    }
    let args = recv::RecvArgs {
        link,
        user: c.user,
        output: out,
        timeout: c.timeout,
        wait: c.wait,
        max_bytes: c.max_bytes.0,
        quiet: c.quiet,
        resume: c.resume,
        status_file: c.status_file,
        no_clobber: c.no_clobber,
    };
    let r = recv::run(&args);
    if !r.ok {
        eprintln!("ethbcast: error: {}", r.error);
    } else if !c.quiet {
        eprintln!(
            "ethbcast: rank {}: {} bytes received and verified{} in {:.2} s",
            r.rank.map_or_else(|| "?".into(), |r| r.to_string()),
            r.bytes,
            c.extract
                .map(|d| format!(", the tree unpacked into {}", d.display()))
                .unwrap_or_default(),
            r.seconds
        );
    }
    if c.json {
        eprintln!("{}", serde_json::to_string(&r).expect("report serialises"));
    }
    Ok(ExitCode::from(r.code))
}

/// `ethbcast doctor`.
fn doctor_cmd(c: DoctorCmd) -> Result<ExitCode, Fatal> {
    use ethbcast_tools::doctor::{self, hosts, Status};
    let hostfile = match &c.hostfile {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| Fatal::io(format!("cannot read {}: {e}", p.display())))?;
            let h = ethbcast::parse_hostfile(&t)
                .map_err(|e| Fatal::new(distribute::EXIT_USAGE, e.to_string()))?;
            Some(h)
        }
        None => None,
    };
    let iface = &c.iface;
    let mut checks = doctor::run(
        iface,
        c.backend,
        distribute::DEFAULT_WINDOW + distribute::RETAINED,
    );
    if let Some(p) = &c.key_file {
        checks.extend(doctor::key_file(p, c.group_id));
    }
    // A key file that its checks failed leaves no host probed and no probe answered (below),
    // so `None` here never stands for a key that could not be read.
    let key = c
        .key_file
        .as_ref()
        .and_then(|p| ethbcast::read_key_file(p, c.group_id).ok());
    let group = c.group_address.mac(c.group_id);
    let failed = |c: &[doctor::Check]| c.iter().any(|c| c.status == Status::Fail);
    match (&hostfile, failed(&checks)) {
        (Some(h), false) => {
            let backend = c.backend.resolve().unwrap_or(c.backend);
            checks.extend(hosts::check(
                iface,
                backend,
                group,
                h,
                c.probe_wait,
                key.as_ref(),
            ));
        }
        (Some(h), true) => checks.push(hosts::not_probed(h.len())),
        (None, _) => {}
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&checks).expect("checks serialise")
        );
    } else {
        for c in &checks {
            println!("{}", c.render());
        }
    }
    if failed(&checks) {
        return Ok(ExitCode::from(distribute::EXIT_FAILED));
    }
    if c.listen {
        listen(iface, c.backend, group, key.as_ref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `ethbcast doctor --listen`: answers probes (those of `key` only, with one) until Ctrl-C.
fn listen(
    iface: &str,
    backend: Backend,
    group: ethbcast::MacAddr,
    key: Option<&ethbcast::Key>,
) -> Result<(), Fatal> {
    use ethbcast_tools::doctor::hosts;
    let backend = backend.resolve().unwrap_or(backend);
    let mut l = hosts::Listener::open(iface, backend, group, key)
        .map_err(|e| distribute::link_error(iface, e))?;
    distribute::drop_capabilities()?;
    let stop = distribute::interrupt_flag();
    let keyed = if key.is_some() {
        "those of the key only"
    } else {
        "without a key (answers not authenticated)"
    };
    eprintln!(
        "ethbcast: answering probes on {iface} ({}), group address {group}, {keyed}; Ctrl-C to stop",
        l.mac()
    );
    let n = l.run(&stop).map_err(|e| distribute::link_error(iface, e))?;
    eprintln!(
        "ethbcast: answered {} probes; dropped {} from group addresses, {} unauthenticated, {} over the rate",
        n.answered, n.group_sources, n.unauthenticated, n.limited
    );
    Ok(())
}

/// `ethbcast keygen`.
fn keygen(file: &std::path::Path, passphrase: bool) -> Result<ExitCode, Fatal> {
    let written = if passphrase {
        let mut line = zeroize::Zeroizing::new(String::new());
        if let Err(e) = std::io::stdin().read_line(&mut line) {
            return Err(Fatal::io(format!("cannot read the passphrase: {e}")));
        }
        ethbcast::write_new_passphrase(file, &line)
    } else {
        ethbcast::write_new_key(file)
    };
    match written {
        Ok(()) => {
            eprintln!(
                "ethbcast: wrote a new group key to {} (mode 0600): copy it to every host and pass --key-file {}",
                file.display(),
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ ethbcast::KeyFileError::Write { .. }) => Err(Fatal::io(e.to_string())),
        Err(e) => Err(Fatal::new(distribute::EXIT_USAGE, e.to_string())),
    }
}
