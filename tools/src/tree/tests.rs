//! The tree's specification: what arrives is what was sent, and no entry of an archive lands
//! outside the directory it is unpacked into.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
use tar::{Builder, EntryType, Header};

use super::{pack, parse_pax_time, pax_time, show, unpack, Refusal, TreeReader, UnpackError};

/// A directory of its own under the system's temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ethbcast-tree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Read-only directories of a tree are opened up first, for a user who is not root.
        for e in walk(&self.0) {
            let p = self.0.join(&e);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700));
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn p(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

/// Sets the modification (and access) time of `path` itself, a symbolic link included.
fn set_mtime(path: &Path, secs: i64, nanos: u32) {
    let t = Timespec {
        tv_sec: secs,
        tv_nsec: nanos.into(),
    };
    let ts = Timestamps {
        last_access: t,
        last_modification: t,
    };
    rustix::fs::utimensat(CWD, path, &ts, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// Every path under `root` (relative, without following links), `root` itself as "".
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::new()];
    let mut i = 0;
    while i < out.len() {
        let rel = out[i].clone();
        i += 1;
        let at = root.join(&rel);
        if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&at) {
            for e in rd.flatten() {
                out.push(rel.join(e.file_name()));
            }
        }
    }
    out
}

/// What a tree holds, entry by entry: kind, permission bits, modification time to the
/// nanosecond, and the bytes of a file or the target of a link.
#[derive(Debug, PartialEq, Eq)]
struct Node {
    kind: &'static str,
    mode: u32,
    mtime: (i64, i64),
    content: Vec<u8>,
}

fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, Node> {
    walk(root)
        .into_iter()
        .map(|rel| {
            let path = root.join(&rel);
            let m = std::fs::symlink_metadata(&path).unwrap();
            let t = m.file_type();
            let (kind, content) = if t.is_symlink() {
                let l = std::fs::read_link(&path).unwrap();
                ("symlink", l.as_os_str().as_bytes().to_vec())
            } else if t.is_dir() {
                ("dir", Vec::new())
            } else {
                ("file", std::fs::read(&path).unwrap())
            };
            let node = Node {
                kind,
                // A link's own bits are always 0777 on Linux.
                mode: m.mode() & 0o7777,
                mtime: (m.mtime(), m.mtime_nsec()),
                content,
            };
            (rel.as_os_str().as_bytes().to_vec(), node)
        })
        .collect()
}

/// A tree of 1 000 files in 26 directories, 60 symbolic links and what trips tar
/// implementations up: names with spaces, newlines, bytes that are not UTF-8, names and link
/// targets longer than a header's 100 bytes, paths longer than 255, empty files and an empty
/// directory, a file of 3 MiB, modes from 0400 to 0755, a read-only directory with files in
/// it, a sticky directory, times with nanoseconds and before 1970.
fn odd_tree(root: &Path) {
    let long = "l".repeat(120);
    let dirs: Vec<Vec<u8>> = vec![
        b"plain".to_vec(),
        b"with space".to_vec(),
        b"new\nline".to_vec(),
        b"bytes \xff\xfe not utf-8".to_vec(),
        long.clone().into_bytes(),
        format!("{long}/{long}/deeper still").into_bytes(),
        "unicode \u{e9}t\u{e9}".as_bytes().to_vec(),
        b"a/b/c/d/e".to_vec(),
        b"-leading dash".to_vec(),
        b"trailing space ".to_vec(),
        b"read only".to_vec(),
        b"sticky".to_vec(),
        b"empty".to_vec(),
        b"tab\there".to_vec(),
        b"quote\"and'back\\slash".to_vec(),
        b"star*question?".to_vec(),
        b"n1".to_vec(),
        b"n1/n2".to_vec(),
        b"n1/n2/n3".to_vec(),
        b"n1/n2/n3/n4".to_vec(),
    ];
    for d in &dirs {
        std::fs::create_dir_all(root.join(p(d))).unwrap();
    }
    let names = |i: usize| -> Vec<u8> {
        match i % 8 {
            0 => format!("f{i:04}").into_bytes(),
            1 => format!("file {i} with spaces").into_bytes(),
            2 => format!("line\nbreak {i}").into_bytes(),
            3 => {
                let mut v = format!("raw{i}-").into_bytes();
                v.extend_from_slice(b"\x80\xc3(\xff");
                v
            }
            4 => format!("{i:04}-{}", "n".repeat(140)).into_bytes(),
            5 => format!("f{i}.tar.gz").into_bytes(),
            6 => format!(".hidden{i}").into_bytes(),
            _ => format!("\u{263a} smile {i}").into_bytes(),
        }
    };
    let modes = [0o644, 0o600, 0o755, 0o400, 0o640, 0o700, 0o444, 0o751];
    for i in 0..1000usize {
        let d = &dirs[i % dirs.len()];
        if d == b"empty" {
            continue;
        }
        let path = root.join(p(d)).join(p(&names(i)));
        let len = match i {
            7 => 3 << 20,
            _ if i % 50 == 3 => 0,
            _ => (i * 37) % 5000 + 1,
        };
        let data: Vec<u8> = (0..len).map(|k| (k * 31 + i * 7 + k / 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(modes[i % modes.len()]),
        )
        .unwrap();
        let nanos = if i % 3 == 0 {
            0
        } else {
            (i as u32 * 123_457) % 1_000_000_000
        };
        set_mtime(&path, 1_600_000_000 + i as i64 * 1000, nanos);
    }
    // The files went round the directories; those that would have gone into "empty" go to
    // the top, with times before 1970.
    let skipped = (0..1000).filter(|i| i % dirs.len() == 12).count();
    for i in 0..skipped {
        let path = root.join(format!("top level {i}"));
        std::fs::write(&path, format!("{i}")).unwrap();
        set_mtime(&path, -86_400 - i as i64, 250_000_000);
    }
    // Symbolic links, none leading outside: to files and directories of the tree, up and
    // down, dangling inside, long targets, targets with `.` and doubled slashes (kept byte for
    // byte), odd names.
    let mut links: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"plain/to-f0000".to_vec(), b"f0000".to_vec()),
        (b"plain/to dir".to_vec(), b"../with space".to_vec()),
        (
            b"n1/n2/n3/n4/up".to_vec(),
            b"../../../../plain/f0000".to_vec(),
        ),
        (b"n1/n2/top".to_vec(), b"../..".to_vec()),
        (b"n1/n2/dot".to_vec(), b"./n3//n4/.".to_vec()),
        (b"n1/dangling".to_vec(), b"not here yet".to_vec()),
        (b"link\nwith newline".to_vec(), b"new\nline".to_vec()),
        (b"link \xff".to_vec(), b"bytes \xff\xfe not utf-8".to_vec()),
        (
            format!("{long}/long link").into_bytes(),
            format!("../{long}/{long}/deeper still/../../{long}/./.").into_bytes(),
        ),
        (b"loopless".to_vec(), b"n1/n2/top/n1/n2/top/plain".to_vec()),
    ];
    for i in 0..50usize {
        links.push((
            format!("a/b/c/d/e/link{i}").into_bytes(),
            format!("../../../../../plain/f{:04}", (i * 8) % 1000).into_bytes(),
        ));
    }
    for (i, (l, t)) in links.iter().enumerate() {
        let path = root.join(p(l));
        std::os::unix::fs::symlink(p(t), &path).unwrap();
        set_mtime(&path, 1_500_000_000 + i as i64, i as u32 * 1000);
    }
    // Directories last, deepest first: their times and modes after their contents.
    let mut all = walk(root);
    all.sort_by_key(|r| std::cmp::Reverse(r.components().count()));
    for (i, rel) in all.iter().enumerate() {
        let path = root.join(rel);
        if !std::fs::symlink_metadata(&path).unwrap().is_dir() {
            continue;
        }
        let mode = match rel.as_os_str().as_bytes() {
            b"read only" => 0o555,
            b"sticky" => 0o1777,
            b"" => 0o750,
            _ => 0o755 - (i as u32 % 3) * 0o10,
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&path, 1_700_000_000 + i as i64, i as u32 * 7);
    }
}

#[test]
fn a_tree_of_1000_odd_files_arrives_identical() {
    let s = Scratch::new("round");
    let src = s.join("src");
    std::fs::create_dir(&src).unwrap();
    odd_tree(&src);
    let sent = snapshot(&src);
    let files = sent.values().filter(|n| n.kind == "file").count();
    let links = sent.values().filter(|n| n.kind == "symlink").count();
    let dirs = sent.values().filter(|n| n.kind == "dir").count();
    assert_eq!((files, links, dirs), (1000, 60, 26));

    let mut stream = Vec::new();
    let packed = pack(&src, &mut stream).unwrap();
    assert_eq!((packed.files, packed.symlinks, packed.dirs), (1000, 60, 26));
    // Through the pipe and the thread of `send -i DIR`: the same bytes.
    let mut piped = Vec::new();
    TreeReader::spawn(&src)
        .unwrap()
        .read_to_end(&mut piped)
        .unwrap();
    assert!(piped == stream, "the reader's stream differs from pack's");

    let dst = s.join("dst");
    std::fs::create_dir(&dst).unwrap();
    let got = unpack(&stream[..], &dst).unwrap();
    assert_eq!((got.files, got.symlinks, got.dirs), (1000, 60, 26));
    assert_eq!(got.bytes, packed.bytes);
    let arrived = snapshot(&dst);
    for (k, n) in &sent {
        assert_eq!(arrived.get(k), Some(n), "entry {:?}", show(k));
    }
    assert_eq!(arrived.len(), sent.len());
}

#[test]
fn a_packed_tree_is_a_tar_archive_that_gnu_tar_unpacks_the_same() {
    let s = Scratch::new("gnutar");
    let src = s.join("src");
    std::fs::create_dir(&src).unwrap();
    odd_tree(&src);
    let archive = s.join("tree.tar");
    pack(&src, std::fs::File::create(&archive).unwrap()).unwrap();
    let dst = s.join("dst");
    std::fs::create_dir(&dst).unwrap();
    let st = std::process::Command::new("tar")
        .arg("-x")
        .arg("-p")
        .arg("--warning=no-timestamp")
        .arg("-f")
        .arg(&archive)
        .arg("-C")
        .arg(&dst)
        .status()
        .expect("GNU tar runs");
    assert!(st.success());
    let (sent, got) = (snapshot(&src), snapshot(&dst));
    for (k, n) in &sent {
        assert_eq!(got.get(k), Some(n), "entry {:?}", show(k));
    }
    assert_eq!(got.len(), sent.len());
}

/// An archive entry written as raw header fields, the name and the link's target byte for
/// byte (the tar crate's own setters refuse what this test needs to send).
struct Raw<'a> {
    kind: EntryType,
    name: &'a [u8],
    link: &'a [u8],
    data: &'a [u8],
}

fn file<'a>(name: &'a [u8], data: &'a [u8]) -> Raw<'a> {
    Raw {
        kind: EntryType::Regular,
        name,
        link: b"",
        data,
    }
}

fn dir(name: &[u8]) -> Raw<'_> {
    Raw {
        kind: EntryType::Directory,
        name,
        link: b"",
        data: b"",
    }
}

fn symlink<'a>(name: &'a [u8], target: &'a [u8]) -> Raw<'a> {
    Raw {
        kind: EntryType::Symlink,
        name,
        link: target,
        data: b"",
    }
}

fn hard_link<'a>(name: &'a [u8], target: &'a [u8]) -> Raw<'a> {
    Raw {
        kind: EntryType::Link,
        name,
        link: target,
        data: b"",
    }
}

fn archive(entries: &[Raw<'_>]) -> Vec<u8> {
    let mut b = Builder::new(Vec::new());
    for e in entries {
        let mut h = Header::new_gnu();
        h.set_entry_type(e.kind);
        h.set_mode(0o644);
        h.set_mtime(1_600_000_000);
        h.set_size(e.data.len() as u64);
        let old = h.as_old_mut();
        assert!(e.name.len() <= 100 && e.link.len() <= 100);
        old.name[..e.name.len()].copy_from_slice(e.name);
        old.linkname[..e.link.len()].copy_from_slice(e.link);
        h.set_cksum();
        b.append(&h, e.data).unwrap();
    }
    b.into_inner().unwrap()
}

/// A hostile archive unpacked into `base/root`, next to `base/outside` (a directory with a
/// file `secret`): it must be refused naming `entry` (where `{base}` stands for `base`), for a
/// reason `why` accepts, and nothing
/// outside `root` may change: `outside` as it was (`secret` still with one name), `base` with
/// nothing new in it.
fn refused(
    tag: &str,
    entries: impl Fn(&Path) -> Vec<u8>,
    entry: &str,
    why: impl Fn(&Refusal) -> bool,
) {
    let s = Scratch::new(tag);
    let outside = s.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"s").unwrap();
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    let before = snapshot(&outside);
    let entry = entry.replace("{base}", &s.0.display().to_string());
    let entry = entry.as_str();
    match unpack(&entries(&s.0)[..], &root) {
        Err(UnpackError::Refused { name, why: w }) => {
            assert_eq!(name, entry, "{tag}: the refused entry");
            assert!(why(&w), "{tag}: refused for {w:?}");
            let msg = UnpackError::Refused { name, why: w }.to_string();
            assert!(msg.contains(&format!("\"{entry}\"")), "{tag}: {msg}");
        }
        other => panic!("{tag}: not refused: {other:?}"),
    }
    assert_eq!(snapshot(&outside), before, "{tag}: outside changed");
    assert_eq!(
        std::fs::metadata(outside.join("secret")).unwrap().nlink(),
        1,
        "{tag}: secret got a hard link"
    );
    let mut top: Vec<PathBuf> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    top.sort();
    assert_eq!(top, [outside, root], "{tag}: something new next to root");
}

#[test]
fn a_name_that_climbs_with_dotdot_is_refused() {
    refused(
        "dotdot",
        |_| archive(&[file(b"../x", b"x")]),
        "../x",
        |w| *w == Refusal::ParentDir,
    );
    refused(
        "dotdot-deep",
        |_| archive(&[dir(b"a/"), file(b"a/../../outside/x", b"x")]),
        "a/../../outside/x",
        |w| *w == Refusal::ParentDir,
    );
}

#[test]
fn an_absolute_name_is_refused() {
    refused(
        "absolute",
        |base| {
            let name = base.join("outside/x");
            archive(&[file(name.as_os_str().as_bytes(), b"x")])
        },
        "{base}/outside/x",
        |w| *w == Refusal::Absolute,
    );
}

#[test]
fn a_symbolic_link_that_points_out_is_refused_and_not_made() {
    refused(
        "link-out",
        |_| archive(&[symlink(b"l", b"../outside")]),
        "l",
        |w| matches!(w, Refusal::SymlinkOut { .. }),
    );
    refused(
        "link-absolute",
        |base| {
            let t = base.join("outside");
            archive(&[symlink(b"l", t.as_os_str().as_bytes())])
        },
        "l",
        |w| matches!(w, Refusal::SymlinkOut { .. }),
    );
}

#[test]
fn a_file_through_a_symbolic_link_is_refused_whether_the_link_points_out_or_in() {
    refused(
        "through-out",
        |_| archive(&[symlink(b"l", b"../outside"), file(b"l/x", b"x")]),
        "l/x",
        |w| *w == Refusal::ThroughSymlink { link: "l".into() },
    );
    refused(
        "through-in",
        |_| archive(&[dir(b"d/"), symlink(b"l", b"d"), file(b"l/x", b"x")]),
        "l/x",
        |w| *w == Refusal::ThroughSymlink { link: "l".into() },
    );
    refused(
        "through-dir",
        |_| archive(&[symlink(b"l", b"../outside"), dir(b"l/sub/")]),
        "l/sub/",
        |w| *w == Refusal::ThroughSymlink { link: "l".into() },
    );
}

#[test]
fn a_symbolic_link_that_climbs_out_through_another_link_is_refused() {
    // `up` leads to the top, inside; `t` read as text stays inside too (d1/d2), but
    // resolved it goes through `up` to the top and then above it.
    refused(
        "chain",
        |_| {
            archive(&[
                dir(b"d1/d2/"),
                symlink(b"d1/d2/up", b"../.."),
                symlink(b"t", b"d1/d2/up/.."),
            ])
        },
        "t",
        |w| matches!(w, Refusal::SymlinkOut { .. }),
    );
    // The same when the link it goes through comes after it in the archive.
    refused(
        "chain-later",
        |_| {
            archive(&[
                symlink(b"t", b"x/../.."),
                dir(b"d1/d2/"),
                symlink(b"d1/d2/up", b"../.."),
                symlink(b"x", b"d1/d2/up"),
            ])
        },
        "t",
        |w| matches!(w, Refusal::SymlinkOut { .. }),
    );
    refused(
        "loop",
        |_| archive(&[symlink(b"a", b"b"), symlink(b"b", b"a")]),
        "a",
        |w| matches!(w, Refusal::SymlinkLoop { .. }),
    );
}

#[test]
fn a_hard_link_out_or_through_a_symbolic_link_is_refused() {
    refused(
        "hard-out",
        |_| archive(&[hard_link(b"h", b"../outside/secret")]),
        "h",
        |w| matches!(w, Refusal::HardLinkOut { .. }),
    );
    refused(
        "hard-absolute",
        |base| {
            let t = base.join("outside/secret");
            archive(&[hard_link(b"h", t.as_os_str().as_bytes())])
        },
        "h",
        |w| matches!(w, Refusal::HardLinkOut { .. }),
    );
    refused(
        "hard-through",
        |_| archive(&[symlink(b"l", b"../outside"), hard_link(b"h", b"l/secret")]),
        "h",
        |w| matches!(w, Refusal::HardLinkTarget { .. }),
    );
    refused(
        "hard-dir",
        |_| archive(&[dir(b"d/"), hard_link(b"h", b"d")]),
        "h",
        |w| matches!(w, Refusal::HardLinkTarget { .. }),
    );
}

#[test]
fn a_symbolic_link_already_on_disk_is_never_followed() {
    let s = Scratch::new("on-disk");
    let outside = s.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("pre")).unwrap();
    let e = unpack(&archive(&[file(b"pre/x", b"x")])[..], &root).unwrap_err();
    match e {
        UnpackError::Refused { name, why } => {
            assert_eq!(name, "pre/x");
            assert_eq!(why, Refusal::NotADirectory { path: "pre".into() });
        }
        e => panic!("{e}"),
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn devices_and_named_pipes_are_refused() {
    for (kind, what) in [
        (EntryType::Char, "character device"),
        (EntryType::Block, "block device"),
        (EntryType::Fifo, "named pipe"),
    ] {
        refused(
            what,
            |_| {
                archive(&[Raw {
                    kind,
                    name: b"dev",
                    link: b"",
                    data: b"",
                }])
            },
            "dev",
            |w| *w == Refusal::Kind(what),
        );
    }
}

#[test]
fn a_file_over_a_directory_is_refused_a_later_file_replaces_an_earlier_one() {
    refused(
        "over-dir",
        |_| archive(&[dir(b"d/"), file(b"d/x", b"x"), file(b"d", b"y")]),
        "d",
        |w| *w == Refusal::OverDirectory,
    );
    let s = Scratch::new("replace");
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    let a = archive(&[
        file(b"f", b"first"),
        hard_link(b"h", b"f"),
        file(b"f", b"second"),
        symlink(b"l", b"f"),
        file(b"l", b"a file now"),
    ]);
    unpack(&a[..], &root).unwrap();
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"second");
    // The hard link kept the first file's bytes: the second was a new file, not written
    // through the first one's name.
    assert_eq!(std::fs::read(root.join("h")).unwrap(), b"first");
    assert!(std::fs::symlink_metadata(root.join("l")).unwrap().is_file());
}

#[test]
fn hard_links_and_links_that_stay_inside_are_made() {
    let s = Scratch::new("inside");
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    let a = archive(&[
        dir(b"./"),
        file(b"./a//b/./f", b"data"),
        hard_link(b"a/h", b"a/b/f"),
        symlink(b"a/b/up", b"../../a"),
        symlink(b"a/b/c/../x", b"y"),
    ]);
    // `a/b/c/../x` has a `..`: refused. Without it the rest unpacks.
    assert!(matches!(
        unpack(&a[..], &root),
        Err(UnpackError::Refused {
            why: Refusal::ParentDir,
            ..
        })
    ));
    let root2 = s.join("root2");
    std::fs::create_dir(&root2).unwrap();
    let a = archive(&[
        dir(b"./"),
        file(b"./a//b/./f", b"data"),
        hard_link(b"a/h", b"a/b/f"),
        symlink(b"a/b/up", b"../../a"),
    ]);
    let got = unpack(&a[..], &root2).unwrap();
    assert_eq!((got.files, got.hard_links, got.symlinks), (1, 1, 1));
    let f = std::fs::metadata(root2.join("a/b/f")).unwrap();
    assert_eq!(f.nlink(), 2);
    assert_eq!(std::fs::metadata(root2.join("a/h")).unwrap().ino(), f.ino());
    assert_eq!(
        std::fs::read_link(root2.join("a/b/up")).unwrap(),
        Path::new("../../a")
    );
}

#[test]
fn set_id_bits_are_dropped_the_other_mode_bits_kept() {
    let s = Scratch::new("setid");
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    let mut b = Builder::new(Vec::new());
    let mut h = Header::new_gnu();
    h.set_entry_type(EntryType::Regular);
    h.set_mode(0o6755);
    h.set_size(1);
    b.append_data(&mut h, "suid", &b"x"[..]).unwrap();
    unpack(&b.into_inner().unwrap()[..], &root).unwrap();
    let m = std::fs::metadata(root.join("suid")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755);
}

#[test]
fn a_stream_cut_short_is_an_error_and_what_follows_the_end_is_read() {
    let s = Scratch::new("short");
    let a = archive(&[file(b"big", &[7u8; 5000])]);
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    let e = unpack(&a[..2000], &root).unwrap_err();
    assert!(e.to_string().contains("\"big\""), "{e}");
    // GNU tar pads an archive to 10 KiB records; the reader is left at the stream's end, so
    // that a writer on its other side (a pipe) is never cut off.
    let root2 = s.join("root2");
    std::fs::create_dir(&root2).unwrap();
    let mut padded = a.clone();
    padded.resize(a.len() + 10240, 0);
    padded.extend_from_slice(b"after the end");
    let mut r = std::io::Cursor::new(&padded);
    unpack(&mut r, &root2).unwrap();
    assert_eq!(r.position() as usize, padded.len());
}

#[test]
fn a_socket_or_pipe_in_the_tree_is_skipped_the_rest_sent() {
    let s = Scratch::new("fifo");
    let src = s.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    rustix::fs::mknodat(
        CWD,
        src.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let mut stream = Vec::new();
    let packed = pack(&src, &mut stream).unwrap();
    assert_eq!(packed.skipped, [PathBuf::from("pipe")]);
    let root = s.join("root");
    std::fs::create_dir(&root).unwrap();
    unpack(&stream[..], &root).unwrap();
    let names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["f"]);
}

#[test]
fn pax_times_round_trip_to_the_nanosecond() {
    for (secs, nanos, text) in [
        (0, 0, "0"),
        (1_600_000_000, 123_456_789, "1600000000.123456789"),
        (5, 500_000_000, "5.5"),
        (-2, 750_000_000, "-1.25"),
        (-1, 0, "-1"),
    ] {
        assert_eq!(pax_time(secs, nanos), text);
        assert_eq!(
            parse_pax_time(text.as_bytes()),
            Some((secs, nanos)),
            "{text}"
        );
    }
    assert_eq!(parse_pax_time(b"1.1234567891"), Some((1, 123_456_789)));
    assert_eq!(parse_pax_time(b"x"), None);
    assert_eq!(parse_pax_time(b"1.x"), None);
}

#[test]
fn names_are_shown_with_control_characters_and_raw_bytes_escaped() {
    assert_eq!(show(b"a b/\xc3\xa9"), "a b/\u{e9}");
    assert_eq!(show(b"new\nline\t\\"), "new\\nline\\t\\\\");
    assert_eq!(show(b"x\xff\xfey"), "x\\xff\\xfey");
}

#[test]
fn a_tree_goes_only_to_a_new_or_empty_directory_whose_parent_exists() {
    use super::Staging;
    let s = Scratch::new("target");
    let full = s.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("a"), b"a").unwrap();
    let e = Staging::check_target(&full).unwrap_err();
    assert!(e.contains("not empty"), "{e}");
    std::fs::write(s.join("file"), b"f").unwrap();
    let e = Staging::check_target(&s.join("file")).unwrap_err();
    assert!(e.contains("not a directory"), "{e}");
    std::os::unix::fs::symlink("full", s.join("link")).unwrap();
    assert!(Staging::check_target(&s.join("link")).is_err());
    std::fs::create_dir(s.join("empty")).unwrap();
    Staging::check_target(&s.join("empty")).unwrap();
    Staging::check_target(&s.join("new")).unwrap();
    let e = Staging::create(&s.join("missing/new"), || 1).unwrap_err();
    assert!(e.contains("missing") && e.contains("does not exist"), "{e}");

    // Unpacked next to the target, then renamed to it: over the empty directory too.
    for name in ["new", "empty"] {
        let st = Staging::create(&s.join(name), rand::random).unwrap();
        assert_eq!(st.path.parent(), Some(s.0.as_path()));
        unpack(&archive(&[file(b"f", b"data")])[..], &st.path).unwrap();
        st.commit().unwrap();
        assert!(!st.path.exists());
        assert_eq!(std::fs::read(s.join(name).join("f")).unwrap(), b"data");
    }
    // A name taken is passed over; removing takes what was unpacked.
    let mut n = 0;
    let first = Staging::create(&s.join("other"), || 7).unwrap();
    let second = Staging::create(&s.join("other"), || {
        n += 1;
        6 + n
    })
    .unwrap();
    assert_ne!(first.path, second.path);
    unpack(
        &archive(&[dir(b"d/"), file(b"d/f", b"x")])[..],
        &second.path,
    )
    .unwrap();
    second.remove();
    first.remove();
    assert!(!second.path.exists() && !first.path.exists());
}
