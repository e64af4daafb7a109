//! Unit tests of the C ABI's Rust side.

use std::ffi::OsString;

use ethbcast::{Algorithm, GroupOptions, Membership, WaitMode, KEY_FILE_ENV};

use super::*;
use crate::handles::lookup;

/// The group id the key tests derive passphrase keys for.
const GID: u32 = 0xEB_CA57;

#[test]
fn defaults_map_to_group_defaults() {
    let o = options_from(&EthbcastOptions::default()).unwrap();
    let g = GroupOptions::default();
    assert_eq!(o.host.group.group_id, g.group_id);
    assert_eq!(o.host.group.timeout, g.timeout);
    assert!(matches!(o.host.membership, Membership::Env));
    assert!(o.progress_thread);
    assert_eq!(o.host.group.algorithm, g.algorithm);
}

/// What the default C options with `set` applied open as.
fn opened_with(set: impl FnOnce(&mut EthbcastOptions)) -> EndpointOptions {
    let mut o = EthbcastOptions::default();
    set(&mut o);
    options_from(&o).unwrap()
}

/// Every algorithm the header names opens as that algorithm of the library, the default as
/// the library's default.
#[test]
fn each_algorithm_of_the_header_is_the_librarys() {
    assert_eq!(EthbcastOptions::default().algorithm, ETHBCAST_ALGO_SIMPLE);
    for (c, algo) in [
        (ETHBCAST_ALGO_PUSHPULL, Algorithm::PushPull),
        (ETHBCAST_ALGO_SIMPLE, Algorithm::Simple),
        (ETHBCAST_ALGO_TREE, Algorithm::Tree),
    ] {
        let o = opened_with(|o| o.algorithm = c);
        assert_eq!(o.host.group.algorithm, algo, "{c}");
    }
}

/// Every wait mode the header names opens as that mode of the library.
#[test]
fn each_wait_mode_of_the_header_is_the_librarys() {
    for (c, mode) in [
        (ETHBCAST_WAIT_ADAPTIVE, WaitMode::Adaptive),
        (ETHBCAST_WAIT_BLOCK, WaitMode::Block),
        (ETHBCAST_WAIT_SPIN, WaitMode::Spin),
        (ETHBCAST_WAIT_DOZE, WaitMode::Doze),
        (ETHBCAST_WAIT_PATIENT, WaitMode::Patient),
    ] {
        let o = opened_with(|o| o.wait = c);
        assert_eq!(o.host.group.wait, mode, "{c}");
    }
}

#[test]
fn bad_options_are_invalid_not_panics() {
    for tweak in [
        |o: &mut EthbcastOptions| o.wait = 9,
        |o: &mut EthbcastOptions| o.algorithm = 9,
        |o: &mut EthbcastOptions| o.timeout_ms = 0,
        |o: &mut EthbcastOptions| o.expected = 70_000,
    ] {
        let mut o = EthbcastOptions::default();
        tweak(&mut o);
        let f = options_from(&o).unwrap_err();
        assert_eq!(f.code, ETHBCAST_ERR_INVALID, "{}", f.message);
    }
}

#[test]
fn keys_come_from_the_options_then_key_file_then_the_environment() {
    let dir = std::env::temp_dir().join(format!("ethbcast-capi-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let phrase = dir.join("phrase");
    std::fs::write(&phrase, "correct horse\n").unwrap();
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").unwrap();
    // Key files must be readable by their owner only.
    for f in [&phrase, &empty] {
        let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(f, owner_only).unwrap();
    }
    let want = ethbcast::read_key_file(&phrase, GID).unwrap();
    let phrase_s = phrase.to_str().unwrap();
    let env_of = |vars: Vec<(&'static str, String)>| {
        move |v: &str| {
            vars.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| OsString::from(x))
        }
    };
    let none = env_of(vec![]);
    // Nothing anywhere: no key (`ethbcast_open` warns once the group is open).
    assert_eq!(resolve_key(None, None, GID, &none).unwrap(), None);
    // The options' 32 bytes, as they are.
    assert_eq!(
        resolve_key(Some(&[7; 32]), None, GID, &none).unwrap(),
        Some([7; 32].into())
    );
    let short = resolve_key(Some(&[7; 31]), None, GID, &none).unwrap_err();
    assert_eq!(short.code, ETHBCAST_ERR_INVALID, "{}", short.message);
    let both = resolve_key(Some(&[7; 32]), Some(phrase_s), GID, &none).unwrap_err();
    assert_eq!(both.code, ETHBCAST_ERR_INVALID, "{}", both.message);
    // A key file, as the command line reads it, from the options or the environment.
    assert_eq!(
        resolve_key(None, Some(phrase_s), GID, &none).unwrap(),
        Some(want.clone())
    );
    let env = env_of(vec![(KEY_FILE_ENV, phrase_s.to_string())]);
    assert_eq!(
        resolve_key(None, None, GID, &env).unwrap(),
        Some(want.clone())
    );
    // The options' key wins over the environment's file.
    assert_eq!(
        resolve_key(Some(&[7; 32]), None, GID, &env).unwrap(),
        Some([7; 32].into())
    );
    // So does the options' key file: the environment is not read (a missing file there
    // would be an error).
    let missing_env = env_of(vec![(
        KEY_FILE_ENV,
        dir.join("missing").display().to_string(),
    )]);
    assert_eq!(
        resolve_key(None, Some(phrase_s), GID, &missing_env).unwrap(),
        Some(want.clone())
    );
    // Unreadable or empty key files: ETHBCAST_ERR_KEY, naming the file, never keyless.
    for (path, what) in [(dir.join("missing"), "cannot read"), (empty, "empty")] {
        let p = path.to_str().unwrap().to_string();
        let e = resolve_key(None, Some(&p), GID, &none).unwrap_err();
        assert_eq!(e.code, ETHBCAST_ERR_KEY, "{}", e.message);
        assert!(
            e.message.contains(what) && e.message.contains(&p),
            "{}",
            e.message
        );
        let e = resolve_key(None, None, GID, env_of(vec![(KEY_FILE_ENV, p.clone())])).unwrap_err();
        assert_eq!(e.code, ETHBCAST_ERR_KEY, "{}", e.message);
        assert!(e.message.contains(KEY_FILE_ENV), "{}", e.message);
    }
    // ETHBCAST_REQUIRE_KEY=1: no key is refused, a key is fine.
    let strict = env_of(vec![(REQUIRE_KEY_ENV, "1".into())]);
    let e = resolve_key(None, None, GID, &strict).unwrap_err();
    assert_eq!(e.code, ETHBCAST_ERR_KEY);
    assert!(
        e.message.contains("ETHBCAST_REQUIRE_KEY=1"),
        "{}",
        e.message
    );
    assert!(resolve_key(Some(&[7; 32]), None, GID, &strict).is_ok());
    let strict_file = env_of(vec![
        (REQUIRE_KEY_ENV, "1".into()),
        (KEY_FILE_ENV, phrase_s.to_string()),
    ]);
    assert_eq!(
        resolve_key(None, None, GID, &strict_file).unwrap(),
        Some(want)
    );
    let lax = env_of(vec![(REQUIRE_KEY_ENV, "0".into())]);
    assert_eq!(resolve_key(None, None, GID, &lax).unwrap(), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn options_init_writes_exactly_the_size_it_is_given() {
    // Room for a newer header's 16 bytes of later fields, then bytes not the options'.
    let mut buf = [0xCC_u8; OPTIONS_SIZE + 32];
    let size = OPTIONS_SIZE + 16;
    // SAFETY: `buf` has `size` writable bytes.
    let rc = unsafe { ethbcast_options_init(buf.as_mut_ptr().cast(), size) };
    assert_eq!(rc, ETHBCAST_OK);
    assert!(buf[OPTIONS_SIZE..size].iter().all(|&b| b == 0));
    assert!(buf[size..].iter().all(|&b| b == 0xCC));
    // SAFETY: `buf` holds the options just written.
    let read = unsafe { read_options(buf.as_ptr().cast()) }.unwrap();
    assert_eq!(read.size as usize, size);
    assert_eq!(read.timeout_ms, EthbcastOptions::default().timeout_ms);
    // A later field set: refused, naming the byte.
    buf[OPTIONS_SIZE + 3] = 1;
    // SAFETY: as above.
    let e = unsafe { read_options(buf.as_ptr().cast()) }.unwrap_err();
    assert_eq!(e.code, ETHBCAST_ERR_INVALID);
    assert!(
        e.message
            .contains(&format!("set byte {}", OPTIONS_SIZE + 3)),
        "{}",
        e.message
    );
    // Smaller than any sized layout: refused, nothing written.
    let mut small = [0xCC_u8; OPTIONS_SIZE];
    // SAFETY: `small` has 36 writable bytes.
    let rc = unsafe { ethbcast_options_init(small.as_mut_ptr().cast(), 36) };
    assert_eq!(rc, ETHBCAST_ERR_INVALID);
    assert!(small.iter().all(|&b| b == 0xCC));
}

#[test]
fn key_null_with_a_length_is_invalid_not_keyless() {
    let c = EthbcastOptions {
        key_len: 32,
        ..EthbcastOptions::default()
    };
    // SAFETY: the key pointers are NULL.
    let e = unsafe { open_options(&c) }.unwrap_err();
    assert_eq!(e.code, ETHBCAST_ERR_INVALID);
    assert!(e.message.contains("key_len is 32"), "{}", e.message);
}

#[test]
fn values_that_are_no_open_handle_are_refused() {
    let x = 0_u64;
    for h in [
        std::ptr::from_ref(&x).cast::<EthbcastGroup>(),
        std::ptr::without_provenance(0x1_0000_0001),
        // An even generation is never a handle's.
        std::ptr::without_provenance(0x2_0000_0001),
    ] {
        assert_eq!(lookup(h).err().map(|f| f.code), Some(ETHBCAST_ERR_HANDLE));
        assert_eq!(ethbcast_close(h.cast_mut()), ETHBCAST_ERR_HANDLE);
        assert_eq!(ethbcast_rank(h), -1);
    }
    assert_eq!(
        lookup(std::ptr::null()).err().map(|f| f.code),
        Some(ETHBCAST_ERR_INVALID)
    );
}

#[test]
fn every_code_has_its_own_sentence() {
    let codes = ETHBCAST_ERR_HANDLE..=ETHBCAST_OK;
    let texts: std::collections::BTreeSet<String> = codes
        .clone()
        // SAFETY: ethbcast_strerror returns a static NUL-terminated string.
        .map(|c| unsafe { CStr::from_ptr(ethbcast_strerror(c)) })
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    assert_eq!(texts.len(), codes.count());
    assert!(!texts.contains("unknown error code"));
}

#[test]
fn a_panic_becomes_an_internal_error() {
    let code = guard(|| panic!("boom"));
    assert_eq!(code, ETHBCAST_ERR_INTERNAL);
    // SAFETY: ethbcast_last_error returns this thread's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(ethbcast_last_error()) };
    assert!(text.to_string_lossy().contains("internal error"));
}

#[test]
fn keyed_groups_encrypt_unless_the_environment_says_no_encrypt() {
    let env = |value: Option<&'static str>| {
        move |v: &str| {
            (v == NO_ENCRYPT_ENV)
                .then_some(value)
                .flatten()
                .map(OsString::from)
        }
    };
    assert!(encrypt_from_env(env(None)));
    assert!(encrypt_from_env(env(Some("0"))));
    assert!(encrypt_from_env(env(Some(""))));
    assert!(!encrypt_from_env(env(Some("1"))));
}
