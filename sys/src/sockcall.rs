//! The socket system calls that pass a C value by address and size (`setsockopt`,
//! `getsockopt`, `bind`), written once for every option and address type the crate uses.
//!
//! The options return the kernel's [`io::Error`] unclassified: what an `errno` means depends
//! on the caller (a refused ring, a refused filter, an AF_XDP step). `bind` classifies the one
//! case every socket bound to an interface shares, the missing interface.

use crate::{Error, Result};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A C type of the kernel's interface: an integer, or a `#[repr(C)]` struct of integers,
/// arrays and raw pointers. Every initialised byte pattern of its size is a valid value, so
/// the kernel may read it as its C counterpart and write any bytes into it.
///
/// # Safety
///
/// Implement it only for such types (never for `bool`, enums, references or types with
/// invariants).
pub(crate) unsafe trait Pod: Copy {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: a type of the kernel's UAPI as `libc` declares it: `#[repr(C)]`, made of
        // integers, arrays of integers and raw pointers only.
        unsafe impl Pod for $t {}
    )*};
}

pod!(
    libc::c_int,
    libc::sock_fprog,
    libc::packet_mreq,
    libc::tpacket_req,
    libc::tpacket_stats,
    libc::sockaddr_ll,
    libc::xdp_umem_reg,
    libc::xdp_mmap_offsets,
    libc::xdp_options,
    libc::xdp_statistics,
    libc::sockaddr_xdp,
    libc::timeval,
);

/// Sets option `name` of `level` on `fd` to `value`, which is of the C type the kernel
/// expects for that option (a `c_int`, `tpacket_req`, `packet_mreq`, ...).
pub(crate) fn setsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a `T: Pod`, a plain C value, and the length
    // passed is its size: the kernel copies that many readable bytes and writes nothing.
    // Pointers inside the value (`sock_fprog`'s program) are checked by the kernel as user
    // addresses when it reads through them, during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads option `name` of `level` on `fd` as its C type `T` (bytes the kernel does not
/// write stay zero).
pub(crate) fn getsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    // SAFETY: `T: Pod`: all-zero bytes are a valid value.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable `T` and `len` its size: the kernel writes at most `len`
    // bytes into it, and any bytes are a valid `T: Pod`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Binds `fd` to `addr` (a `sockaddr_ll`, `sockaddr_xdp`, ...) on interface `ifindex`. An
/// interface that is gone (`ENODEV`, `ENXIO`) is [`Error::NoSuchInterface`]; `other`
/// classifies every other failure.
pub(crate) fn bind<A: Pod>(
    fd: BorrowedFd<'_>,
    addr: &A,
    ifindex: u32,
    other: impl FnOnce(io::Error) -> Error,
) -> Result<()> {
    // SAFETY: `addr` is a live reference to an initialised socket address of the socket's
    // family and the length passed is its size; the kernel copies it and writes nothing.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const A).cast(),
            size_of::<A>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    Err(match err.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) => {
            Error::NoSuchInterface(format!("interface index {ifindex}"))
        }
        _ => other(err),
    })
}
