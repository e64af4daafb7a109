//! Failed calls: the `ETHBCAST_ERR_*` code of every error, the calling thread's last-error
//! sentence, and the guard that turns an error or a panic into both (nothing unwinds into C).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ethbcast::{GroupError, HostError, HostRingError, LinkError, MemberError};

use crate::endpoint::CallError;
use crate::{
    ETHBCAST_ERR_BAD_RANK, ETHBCAST_ERR_INTERNAL, ETHBCAST_ERR_INVALID, ETHBCAST_ERR_JOIN_TIMEOUT,
    ETHBCAST_ERR_KEY, ETHBCAST_ERR_LENGTH, ETHBCAST_ERR_LINK, ETHBCAST_ERR_MEMBERSHIP,
    ETHBCAST_ERR_NO_INTERFACE, ETHBCAST_ERR_PEER_DEAD, ETHBCAST_ERR_PERMISSION,
    ETHBCAST_ERR_SHARED_MEMORY, ETHBCAST_ERR_TIMEOUT, ETHBCAST_OK,
};

/// A failed call: its code and the sentence for `ethbcast_last_error`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            code: ETHBCAST_ERR_INVALID,
            message: message.into(),
        }
    }
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        Failure {
            code: code_of(&e),
            message: e.to_string(),
        }
    }
}

fn link_code(e: &LinkError) -> c_int {
    match e {
        LinkError::NoSuchInterface(_) => ETHBCAST_ERR_NO_INTERFACE,
        LinkError::PermissionDenied => ETHBCAST_ERR_PERMISSION,
        _ => ETHBCAST_ERR_LINK,
    }
}

/// The code of an error.
fn code_of(e: &CallError) -> c_int {
    match e {
        CallError::Host(HostError::Length { .. }) => ETHBCAST_ERR_LENGTH,
        CallError::Poisoned => ETHBCAST_ERR_INTERNAL,
        CallError::Host(HostError::Placement(_)) => ETHBCAST_ERR_MEMBERSHIP,
        CallError::Host(HostError::Host(h)) => match h {
            HostRingError::Timeout { .. } => ETHBCAST_ERR_TIMEOUT,
            HostRingError::RankGone { .. } => ETHBCAST_ERR_PEER_DEAD,
            HostRingError::OwnerFailed { .. } => ETHBCAST_ERR_JOIN_TIMEOUT,
            HostRingError::Length { .. } => ETHBCAST_ERR_LENGTH,
            HostRingError::Topology(_) => ETHBCAST_ERR_MEMBERSHIP,
            HostRingError::Shm(_)
            | HostRingError::Layout { .. }
            | HostRingError::SlotTaken { .. }
            | HostRingError::Protocol(_) => ETHBCAST_ERR_SHARED_MEMORY,
        },
        CallError::Host(HostError::Group(g)) => match g {
            GroupError::Link(l) => link_code(l),
            GroupError::Timeout { .. } => ETHBCAST_ERR_TIMEOUT,
            GroupError::Member(MemberError::PeerDead(_)) => ETHBCAST_ERR_PEER_DEAD,
            GroupError::Member(MemberError::BadRank { .. }) => ETHBCAST_ERR_BAD_RANK,
            GroupError::Member(_) => ETHBCAST_ERR_INTERNAL,
            GroupError::JoinTimeout { .. } => ETHBCAST_ERR_JOIN_TIMEOUT,
            GroupError::Membership(_) | GroupError::NotAMember(_) | GroupError::Join(_) => {
                ETHBCAST_ERR_MEMBERSHIP
            }
            GroupError::Interrupted => ETHBCAST_ERR_TIMEOUT,
            GroupError::BadRank { .. } => ETHBCAST_ERR_BAD_RANK,
            GroupError::Length { .. } => ETHBCAST_ERR_LENGTH,
            GroupError::Parts { .. } => ETHBCAST_ERR_INVALID,
            GroupError::NoKey => ETHBCAST_ERR_KEY,
        },
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: &str) {
    // Interior NUL bytes cannot appear in a C string; they never appear in our messages.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `f`, turning an error or a panic into a code and the thread's last-error sentence.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ETHBCAST_OK,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.code
        }
        Err(_) => {
            set_last_error("internal error (a bug in ethbcast): close the group");
            ETHBCAST_ERR_INTERNAL
        }
    }
}

/// The calling thread's last-error sentence, valid until the thread's next failing call (the
/// `CString` lives in a thread-local that only [`set_last_error`] replaces).
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
