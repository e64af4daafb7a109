//! Unpacking a tar stream into a directory, and nowhere else (see the module docs of
//! [`super`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, CWD};
use rustix::io::Errno;
use tar::EntryType;

use super::{parse_pax_time, show};

/// What [`unpack`] made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Unpacked {
    /// Regular files.
    pub files: u64,
    /// Directories (entries of the archive, the top one included, and those made for a path
    /// whose directory the archive did not list).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links.
    pub hard_links: u64,
    /// Bytes of the regular files.
    pub bytes: u64,
}

/// Why an entry was refused: what it would have done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Its name is empty.
    #[error("an empty name")]
    Empty,
    /// Its name starts at the root of the file system.
    #[error("an absolute name")]
    Absolute,
    /// Its name climbs with `..`.
    #[error("a `..` in its name")]
    ParentDir,
    /// A symbolic link whose target is absolute or leads outside the directory, at any step
    /// of its resolution (through other links of the tree).
    #[error("a symbolic link to \"{target}\", which leads outside the directory")]
    SymlinkOut {
        /// The target, shown.
        target: String,
    },
    /// A symbolic link whose resolution goes through more than [`MAX_HOPS`] links.
    #[error("a symbolic link to \"{target}\", which goes through more than 40 links")]
    SymlinkLoop {
        /// The target, shown.
        target: String,
    },
    /// A symbolic link with an empty target.
    #[error("a symbolic link with an empty target")]
    EmptyTarget,
    /// Its path goes through a symbolic link of the archive.
    #[error("its path goes through the symbolic link \"{link}\"")]
    ThroughSymlink {
        /// The link, shown.
        link: String,
    },
    /// A hard link to a name that is absolute or climbs with `..`.
    #[error("a hard link to \"{target}\", outside the directory")]
    HardLinkOut {
        /// The target, shown.
        target: String,
    },
    /// A hard link to anything but a regular file that the archive made before it (by a
    /// path without symbolic links).
    #[error("a hard link to \"{target}\", which is not a regular file the archive made before it")]
    HardLinkTarget {
        /// The target, shown.
        target: String,
    },
    /// A directory on its path is something else on disk (a file, or a symbolic link, which
    /// is never followed).
    #[error("\"{path}\" on its path is not a directory")]
    NotADirectory {
        /// That directory's path, shown.
        path: String,
    },
    /// A file, a link or a device where a directory is.
    #[error("a directory of this name is there already")]
    OverDirectory,
    /// A directory where a file is.
    #[error("a file of this name is there already")]
    OverFile,
    /// An entry of a kind that is not unpacked.
    #[error("a {0}, which is not unpacked")]
    Kind(&'static str),
}

/// Why [`unpack`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// An entry that would land outside the directory, or that is not unpacked.
    #[error("tree entry \"{name}\" refused: {why}")]
    Refused {
        /// The entry's name, shown (see [`show`]).
        name: String,
        /// What it would have done.
        why: Refusal,
    },
    /// Writing an entry failed (the disk is full, say).
    #[error("tree entry \"{name}\": {source}")]
    Io {
        /// The entry's name, shown.
        name: String,
        /// What the system said.
        source: io::Error,
    },
    /// The stream is not a tar archive, or one cut short.
    #[error("the stream is not a tar archive (or a damaged one): {0}")]
    Archive(io::Error),
}

impl UnpackError {
    /// The system's error, for an error of I/O.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            UnpackError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// How many symbolic links one resolution may go through (the kernel's limit).
const MAX_HOPS: u32 = 40;

/// Unpacks the tar archive `input` into the directory `root`, which should be empty (see the
/// module docs of [`super`] for what is refused). Reads `input` to its end, past the archive's
/// end marker, so that a writer on its other side is never cut off.
pub fn unpack(input: impl Read, root: &Path) -> Result<Unpacked, UnpackError> {
    let root_fd =
        rustix::fs::openat(CWD, root, dir_flags(), Mode::empty()).map_err(|e| UnpackError::Io {
            name: ".".into(),
            source: io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot open {}: {e}", root.display()),
            ),
        })?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let mut u = Unpacker::new(root_fd);
    {
        let mut ar = tar::Archive::new(&mut input);
        for e in ar.entries().map_err(UnpackError::Archive)? {
            let mut e = e.map_err(UnpackError::Archive)?;
            u.entry(&mut e)?;
        }
    }
    u.finish()?;
    // The end marker's second block, a record's padding (GNU tar's 10 KiB), anything else
    // after the end: read, not unpacked.
    io::copy(&mut input, &mut io::sink()).map_err(UnpackError::Archive)?;
    Ok(u.done)
}

/// `openat` flags of a directory on the way: never through a symbolic link.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// An entry's path: its components, none empty, `.` or `..`; empty for the directory itself.
type Comps = Vec<Vec<u8>>;

/// The key of a path in the unpacker's maps: its components joined with `/`.
fn key(c: &[Vec<u8>]) -> Vec<u8> {
    c.join(&b'/')
}

/// Checks an entry's name and splits it into components (see [`Comps`]).
fn parse(raw: &[u8]) -> Result<Comps, Refusal> {
    if raw.is_empty() {
        return Err(Refusal::Empty);
    }
    if raw[0] == b'/' {
        return Err(Refusal::Absolute);
    }
    let mut c = Vec::new();
    for part in raw.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(Refusal::ParentDir),
            p => c.push(p.to_vec()),
        }
    }
    Ok(c)
}

/// A directory's mode and time, set at the end; `None` time: one the archive did not list.
#[derive(Debug, Clone, Copy)]
struct DirAttrs {
    mode: u32,
    mtime: Option<(i64, u32)>,
}

/// The mode of a directory that the archive did not list (made for a path inside it).
const IMPLICIT_DIR_MODE: u32 = 0o755;

/// A symbolic link of the archive, made at the end.
#[derive(Debug, Clone)]
struct Pending {
    path: Comps,
    target: Vec<u8>,
    mtime: (i64, u32),
}

struct Unpacker {
    root: Rc<OwnedFd>,
    /// The directory of the last entry, opened.
    cached: Option<(Comps, Rc<OwnedFd>)>,
    /// Symbolic links to make at the end, by [`key`].
    symlinks: HashMap<Vec<u8>, Pending>,
    /// Directories whose mode and time are set at the end, by [`key`].
    dirs: HashMap<Vec<u8>, DirAttrs>,
    /// The top directory's mode and time, if the archive has it (`./`).
    top: Option<DirAttrs>,
    done: Unpacked,
    buf: Vec<u8>,
}

fn times((secs, nanos): (i64, u32)) -> Timestamps {
    let t = Timespec {
        tv_sec: secs,
        tv_nsec: nanos.into(),
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Permission bits as set on disk: as sent, less set-user-ID and set-group-ID.
fn permissions(mode: u32) -> Mode {
    Mode::from_raw_mode(mode & 0o1777)
}

impl Unpacker {
    fn new(root: OwnedFd) -> Unpacker {
        Unpacker {
            root: Rc::new(root),
            cached: None,
            symlinks: HashMap::new(),
            dirs: HashMap::new(),
            top: None,
            done: Unpacked {
                dirs: 1,
                ..Unpacked::default()
            },
            buf: vec![0; 256 << 10],
        }
    }

    fn entry<R: Read>(&mut self, e: &mut tar::Entry<'_, R>) -> Result<(), UnpackError> {
        let kind = e.header().entry_type();
        if kind == EntryType::XGlobalHeader {
            return Ok(());
        }
        let raw = e.path_bytes().into_owned();
        let name = show(&raw);
        let refused = |why| UnpackError::Refused {
            name: name.clone(),
            why,
        };
        let path = parse(&raw).map_err(refused)?;
        let mtime = mtime_of(e).map_err(UnpackError::Archive)?;
        let mode = e.header().mode().map_err(UnpackError::Archive)?;
        let io = |source: io::Error| UnpackError::Io {
            name: name.clone(),
            source,
        };
        match kind {
            EntryType::Directory => self.dir(path, mode, mtime, &name),
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                let size = e.size();
                self.file(&path, e, size, mode, mtime, &name)
                    .map_err(|x| match x {
                        Made::Refused(why) => refused(why),
                        Made::Io(err) => io(err),
                    })
            }
            EntryType::Symlink => {
                let target = e.link_name_bytes().unwrap_or_default().into_owned();
                self.symlink(path, target, mtime, &name)
            }
            EntryType::Link => {
                let target = e.link_name_bytes().unwrap_or_default().into_owned();
                self.hard_link(&path, &target, &name)
            }
            EntryType::Char => Err(refused(Refusal::Kind("character device"))),
            EntryType::Block => Err(refused(Refusal::Kind("block device"))),
            EntryType::Fifo => Err(refused(Refusal::Kind("named pipe"))),
            _ => Err(refused(Refusal::Kind(
                "entry of a type this tool does not know",
            ))),
        }
    }

    /// The directory `path` (components under the top), opened without following a
    /// symbolic link at any step; missing ones are made (`create`) or an error. Refuses a
    /// path that goes through a symbolic link of the archive.
    fn open_dir(
        &mut self,
        path: &[Vec<u8>],
        create: bool,
        name: &str,
    ) -> Result<Rc<OwnedFd>, UnpackError> {
        let refused = |why| UnpackError::Refused {
            name: name.to_owned(),
            why,
        };
        self.through_symlink(path, path.len()).map_err(refused)?;
        if path.is_empty() {
            return Ok(self.root.clone());
        }
        if let Some((c, fd)) = &self.cached {
            if c.as_slice() == path {
                return Ok(fd.clone());
            }
        }
        let mut fd = self.root.clone();
        for i in 0..path.len() {
            let comp = path[i].as_slice();
            let next = match rustix::fs::openat(&*fd, comp, dir_flags(), Mode::empty()) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&*fd, comp, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(io_err(name, e)),
                    }
                    self.dirs.entry(key(&path[..=i])).or_insert(DirAttrs {
                        mode: IMPLICIT_DIR_MODE,
                        mtime: None,
                    });
                    self.done.dirs += 1;
                    rustix::fs::openat(&*fd, comp, dir_flags(), Mode::empty())
                }
                r => r,
            };
            fd = match next {
                Ok(f) => Rc::new(f),
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    return Err(refused(Refusal::NotADirectory {
                        path: show(&key(&path[..=i])),
                    }))
                }
                Err(e) => return Err(io_err(name, e)),
            };
        }
        self.cached = Some((path.to_vec(), fd.clone()));
        Ok(fd)
    }

    /// Refuses a path whose first `n` components lead through a symbolic link of the archive
    /// (recorded, made only at the end).
    fn through_symlink(&self, path: &[Vec<u8>], n: usize) -> Result<(), Refusal> {
        if self.symlinks.is_empty() {
            return Ok(());
        }
        for i in 1..=n.min(path.len()) {
            let k = key(&path[..i]);
            if self.symlinks.contains_key(&k) {
                return Err(Refusal::ThroughSymlink { link: show(&k) });
            }
        }
        Ok(())
    }

    /// Makes room for a file or a link at `name` in `dir`: what the archive made there before
    /// (a file, a link) goes, a directory stays and the entry is refused.
    fn clear(&mut self, dir: &OwnedFd, path: &[Vec<u8>], entry: &str) -> Result<(), UnpackError> {
        let last = path.last().expect("an entry below the top");
        self.symlinks.remove(&key(path));
        match rustix::fs::statat(dir, last.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io_err(entry, e)),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                Err(UnpackError::Refused {
                    name: entry.to_owned(),
                    why: Refusal::OverDirectory,
                })
            }
            Ok(_) => rustix::fs::unlinkat(dir, last.as_slice(), AtFlags::empty())
                .map_err(|e| io_err(entry, e)),
        }
    }

    fn dir(
        &mut self,
        path: Comps,
        mode: u32,
        mtime: (i64, u32),
        name: &str,
    ) -> Result<(), UnpackError> {
        let attrs = DirAttrs {
            mode,
            mtime: Some(mtime),
        };
        let Some((last, up)) = path.split_last() else {
            self.top = Some(attrs);
            return Ok(());
        };
        let parent = self.open_dir(up, true, name)?;
        self.symlinks.remove(&key(&path));
        match rustix::fs::mkdirat(&*parent, last.as_slice(), Mode::from_raw_mode(0o700)) {
            Ok(()) => self.done.dirs += 1,
            Err(Errno::EXIST) => {
                let st = rustix::fs::statat(&*parent, last.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| io_err(name, e))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    return Err(UnpackError::Refused {
                        name: name.to_owned(),
                        why: Refusal::OverFile,
                    });
                }
            }
            Err(e) => return Err(io_err(name, e)),
        }
        self.dirs.insert(key(&path), attrs);
        Ok(())
    }

    fn file<R: Read>(
        &mut self,
        path: &[Vec<u8>],
        data: &mut R,
        size: u64,
        mode: u32,
        mtime: (i64, u32),
        name: &str,
    ) -> Result<(), Made> {
        let Some((last, up)) = path.split_last() else {
            return Err(Made::Refused(Refusal::OverDirectory));
        };
        let parent = self.open_dir(up, true, name).map_err(Made::from)?;
        self.clear(&parent, path, name).map_err(Made::from)?;
        let fd = rustix::fs::openat(
            &*parent,
            last.as_slice(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| Made::Io(e.into()))?;
        let mut f = File::from(fd);
        let mut got = 0u64;
        loop {
            let n = match data.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // The archive's bytes did not come.
                Err(e) => {
                    return Err(Made::Io(io::Error::new(
                        e.kind(),
                        format!("reading its data: {e}"),
                    )))
                }
            };
            f.write_all(&self.buf[..n]).map_err(Made::Io)?;
            got += n as u64;
        }
        if got != size {
            return Err(Made::Io(io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("the stream ended inside it, after {got} of its {size} bytes"),
            )));
        }
        self.done.bytes += got;
        rustix::fs::fchmod(&f, permissions(mode)).map_err(|e| Made::Io(e.into()))?;
        rustix::fs::futimens(&f, &times(mtime)).map_err(|e| Made::Io(e.into()))?;
        self.done.files += 1;
        Ok(())
    }

    fn symlink(
        &mut self,
        path: Comps,
        target: Vec<u8>,
        mtime: (i64, u32),
        name: &str,
    ) -> Result<(), UnpackError> {
        let refused = |why| UnpackError::Refused {
            name: name.to_owned(),
            why,
        };
        if path.is_empty() {
            return Err(refused(Refusal::OverDirectory));
        }
        if target.is_empty() {
            return Err(refused(Refusal::EmptyTarget));
        }
        if target[0] == b'/' {
            return Err(refused(Refusal::SymlinkOut {
                target: show(&target),
            }));
        }
        let parent = self.open_dir(&path[..path.len() - 1], true, name)?;
        self.clear(&parent, &path, name)?;
        self.symlinks.insert(
            key(&path),
            Pending {
                path,
                target,
                mtime,
            },
        );
        Ok(())
    }

    fn hard_link(
        &mut self,
        path: &[Vec<u8>],
        target: &[u8],
        name: &str,
    ) -> Result<(), UnpackError> {
        let refused = |why| UnpackError::Refused {
            name: name.to_owned(),
            why,
        };
        let shown = show(target);
        let t = parse(target).map_err(|_| {
            refused(Refusal::HardLinkOut {
                target: shown.clone(),
            })
        })?;
        let not_a_file = || {
            refused(Refusal::HardLinkTarget {
                target: shown.clone(),
            })
        };
        let (Some((tlast, tup)), Some((last, up))) = (t.split_last(), path.split_last()) else {
            return Err(not_a_file());
        };
        if t.as_slice() == path {
            return Ok(());
        }
        // The target's path, the target itself included, without a link of the archive.
        if self.through_symlink(&t, t.len()).is_err() {
            return Err(not_a_file());
        }
        let tdir = match self.open_dir(tup, false, name) {
            Ok(d) => d,
            Err(UnpackError::Refused { .. }) => return Err(not_a_file()),
            Err(UnpackError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
                return Err(not_a_file())
            }
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&*tdir, tlast.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
            Ok(_) | Err(Errno::NOENT) => return Err(not_a_file()),
            Err(e) => return Err(io_err(name, e)),
        }
        let dir = self.open_dir(up, true, name)?;
        self.clear(&dir, path, name)?;
        rustix::fs::linkat(
            &*tdir,
            tlast.as_slice(),
            &*dir,
            last.as_slice(),
            AtFlags::empty(),
        )
        .map_err(|e| io_err(name, e))?;
        self.done.hard_links += 1;
        Ok(())
    }

    /// Checks every symbolic link against the tree as it stands now, makes them, then sets
    /// the directories' modes and times, deepest first.
    fn finish(&mut self) -> Result<(), UnpackError> {
        let mut links: Vec<Pending> = self.symlinks.values().cloned().collect();
        links.sort_by(|a, b| a.path.cmp(&b.path));
        for l in &links {
            let from = &l.path[..l.path.len() - 1];
            let mut hops = 0;
            if let Err(why) = resolve(&self.symlinks, from, &l.target, &mut hops) {
                return Err(UnpackError::Refused {
                    name: show(&key(&l.path)),
                    why,
                });
            }
        }
        self.symlinks.clear();
        for l in &links {
            let name = show(&key(&l.path));
            let (last, up) = l.path.split_last().expect("below the top");
            let dir = self.open_dir(up, false, &name)?;
            rustix::fs::symlinkat(l.target.as_slice(), &*dir, last.as_slice())
                .map_err(|e| io_err(&name, e))?;
            rustix::fs::utimensat(
                &*dir,
                last.as_slice(),
                &times(l.mtime),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io_err(&name, e))?;
            self.done.symlinks += 1;
        }
        let mut dirs: Vec<(Comps, DirAttrs)> = self
            .dirs
            .drain()
            .map(|(k, a)| (k.split(|&b| b == b'/').map(<[u8]>::to_vec).collect(), a))
            .collect();
        dirs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let top = self.top.unwrap_or(DirAttrs {
            mode: IMPLICIT_DIR_MODE,
            mtime: None,
        });
        dirs.push((Vec::new(), top));
        for (path, a) in dirs {
            let name = if path.is_empty() {
                ".".into()
            } else {
                show(&key(&path))
            };
            let fd = self.open_dir(&path, false, &name)?;
            rustix::fs::fchmod(&*fd, permissions(a.mode)).map_err(|e| io_err(&name, e))?;
            if let Some(t) = a.mtime {
                rustix::fs::futimens(&*fd, &times(t)).map_err(|e| io_err(&name, e))?;
            }
        }
        Ok(())
    }
}

/// What [`Unpacker::file`] failed with.
enum Made {
    Refused(Refusal),
    Io(io::Error),
}

impl From<UnpackError> for Made {
    fn from(e: UnpackError) -> Made {
        match e {
            UnpackError::Refused { why, .. } => Made::Refused(why),
            UnpackError::Io { source, .. } => Made::Io(source),
            UnpackError::Archive(e) => Made::Io(e),
        }
    }
}

fn io_err(name: &str, e: Errno) -> UnpackError {
    UnpackError::Io {
        name: name.to_owned(),
        source: e.into(),
    }
}

/// The entry's modification time: the PAX record's, to the nanosecond, else the header's.
fn mtime_of<R: Read>(e: &mut tar::Entry<'_, R>) -> io::Result<(i64, u32)> {
    if let Some(exts) = e.pax_extensions()? {
        for x in exts.flatten() {
            if x.key_bytes() == b"mtime" {
                if let Some(t) = parse_pax_time(x.value_bytes()) {
                    return Ok(t);
                }
            }
        }
    }
    let secs = e.header().mtime()?;
    Ok((i64::try_from(secs).unwrap_or(i64::MAX), 0))
}

/// Resolves `target`, a symbolic link's target read from the directory `from`, in the tree
/// whose symbolic links are `links` (by [`key`]), as the kernel would: `..` climbs from where
/// the resolution stands, a name that is a link of the tree is replaced by its own
/// resolution. Returns the components it ends at; refuses an absolute target and any step
/// that climbs above the top. A name that is not a link (a directory, a file, nothing yet) is
/// taken as a directory: on disk `..` after a file fails, after a missing name too.
fn resolve(
    links: &HashMap<Vec<u8>, Pending>,
    from: &[Vec<u8>],
    target: &[u8],
    hops: &mut u32,
) -> Result<Comps, Refusal> {
    let out = || Refusal::SymlinkOut {
        target: show(target),
    };
    if target.first() == Some(&b'/') {
        return Err(out());
    }
    let mut at: Comps = from.to_vec();
    for part in target.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if at.pop().is_none() {
                    return Err(out());
                }
            }
            name => {
                at.push(name.to_vec());
                if let Some(l) = links.get(&key(&at)) {
                    *hops += 1;
                    if *hops > MAX_HOPS {
                        return Err(Refusal::SymlinkLoop {
                            target: show(target),
                        });
                    }
                    at.pop();
                    at = resolve(links, &at, &l.target, hops).map_err(|e| match e {
                        Refusal::SymlinkOut { .. } => out(),
                        other => other,
                    })?;
                }
            }
        }
    }
    Ok(at)
}

/// The fresh directory a receiver unpacks into, next to its target (so that the final rename
/// stays within one file system): `.NAME.ethbcast-PID-RANDOM.part`, renamed to the target once
/// the stream's digest matched ([`Staging::commit`]), removed otherwise ([`Staging::remove`]).
#[derive(Debug, Clone)]
pub struct Staging {
    /// The directory unpacked into.
    pub path: PathBuf,
    /// The target.
    pub dst: PathBuf,
}

/// Fresh names tried for a staging directory.
const STAGING_TRIES: usize = 16;

impl Staging {
    /// Whether `dst` can take a tree: it does not exist, or is an empty directory (not a link
    /// to one). A tree never replaces or merges into a directory that holds anything.
    pub fn check_target(dst: &Path) -> Result<(), String> {
        let d = dst.display();
        match std::fs::symlink_metadata(dst) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot look at {d}: {e}")),
            Ok(m) if m.is_dir() => match std::fs::read_dir(dst).map(|mut r| r.next().is_none()) {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!(
                    "{d} exists and is not empty: give a new or an empty directory (a tree is unpacked whole, never into what a directory holds)"
                )),
                Err(e) => Err(format!("cannot read {d}: {e}")),
            },
            Ok(_) => Err(format!("{d} exists and is not a directory")),
        }
    }

    /// Makes the staging directory of `dst` (mode 0700; a name drawn from `suffix`, the next
    /// one if taken).
    pub fn create(dst: &Path, mut suffix: impl FnMut() -> u64) -> Result<Staging, String> {
        let name = dst
            .file_name()
            .ok_or_else(|| format!("{}: not a directory name", dst.display()))?;
        let parent = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        for _ in 0..STAGING_TRIES {
            let path = parent.join(format!(
                ".{}.ethbcast-{}-{:016x}.part",
                name.to_string_lossy(),
                std::process::id(),
                suffix()
            ));
            match rustix::fs::mkdirat(CWD, &path, Mode::from_raw_mode(0o700)) {
                Ok(()) => {
                    return Ok(Staging {
                        path,
                        dst: dst.to_path_buf(),
                    })
                }
                Err(Errno::EXIST) => continue,
                Err(Errno::NOENT) => {
                    return Err(format!(
                        "cannot unpack into {}: the directory {} does not exist",
                        dst.display(),
                        parent.display()
                    ))
                }
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        Err(format!(
            "cannot create a directory next to {}: {STAGING_TRIES} fresh names were taken",
            dst.display()
        ))
    }

    /// Makes the unpacked tree durable and gives it the target's name: the file system's
    /// writes synced (one `syncfs` for every file), the rename, the parent synced.
    pub fn commit(&self) -> Result<(), String> {
        let dir = rustix::fs::openat(CWD, &self.path, dir_flags(), Mode::empty())
            .map_err(|e| format!("cannot open {}: {e}", self.path.display()))?;
        rustix::fs::syncfs(&dir)
            .map_err(|e| format!("cannot sync {}: {e}", self.path.display()))?;
        std::fs::rename(&self.path, &self.dst).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                self.path.display(),
                self.dst.display()
            )
        })?;
        let parent = match self.dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match File::open(parent).and_then(|d| d.sync_all()) {
            Err(e) if e.raw_os_error() != Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                Err(format!("cannot sync directory {}: {e}", parent.display()))
            }
            _ => Ok(()),
        }
    }

    /// Removes the staging directory and whatever was unpacked into it (never following a
    /// link in it).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }

    /// The staging directory's name, shown.
    pub fn shown(&self) -> String {
        show(self.path.as_os_str().as_bytes())
    }
}
