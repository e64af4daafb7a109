//! The handle table: the open groups by handle. A handle is a slot map key as a pointer-sized
//! value, never an address, so a stale or forged handle is refused, not dereferenced.

use std::ffi::c_int;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use slotmap::{DefaultKey, Key, KeyData, SlotMap};

use crate::failure::{guard, set_last_error, Failure};
use crate::{EthbcastGroup, ETHBCAST_ERR_BUSY, ETHBCAST_ERR_HANDLE, ETHBCAST_ERR_INTERNAL};

// Handles carry a 64-bit key (a 32-bit generation above a 32-bit index) in a pointer.
const _: () = assert!(usize::BITS >= 64, "group handles need 64-bit pointers");

/// The open groups, by handle. A handle is the key of its entry (`KeyData::as_ffi`) as a
/// pointer-sized value, never an address; closing removes the entry, and the slot's next
/// entry has another generation, so a stale handle is never taken for a newer group. Calls
/// hold a reference of their own while they run: a close meanwhile frees nothing.
static GROUPS: LazyLock<Mutex<SlotMap<DefaultKey, Arc<EthbcastGroup>>>> =
    LazyLock::new(|| Mutex::new(SlotMap::new()));

/// The handle table, locked. Nothing panics while it is held; should something, the table
/// itself is still consistent.
pub(crate) fn groups() -> std::sync::MutexGuard<'static, SlotMap<DefaultKey, Arc<EthbcastGroup>>> {
    GROUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Enters an opened group into the handle table; returns its handle (never NULL).
pub(crate) fn register(group: EthbcastGroup) -> *mut EthbcastGroup {
    let key = groups().insert(Arc::new(group));
    // The key's generation is odd, so the value is not 0; `usize` has 64 bits (asserted).
    std::ptr::without_provenance_mut(key.data().as_ffi() as usize)
}

/// The failure of a handle that is not in the table.
pub(crate) fn not_open(handle: *const EthbcastGroup) -> Failure {
    Failure {
        code: ETHBCAST_ERR_HANDLE,
        message: format!(
            "group handle {handle:p} is not open: it was closed already, or was not returned by ethbcast_open"
        ),
    }
}

/// The table key a handle stands for; NULL is `ETHBCAST_ERR_INVALID`, a value no key has
/// (e.g. the address of something) `ETHBCAST_ERR_HANDLE`.
pub(crate) fn key_of(handle: *const EthbcastGroup) -> Result<DefaultKey, Failure> {
    if handle.is_null() {
        return Err(Failure::invalid("group handle is NULL"));
    }
    let value = handle.addr() as u64;
    let data = KeyData::from_ffi(value);
    if data.as_ffi() != value {
        return Err(not_open(handle));
    }
    Ok(data.into())
}

/// The open group behind a handle, held for the duration of a call.
pub(crate) fn lookup(handle: *const EthbcastGroup) -> Result<Arc<EthbcastGroup>, Failure> {
    let key = key_of(handle)?;
    groups().get(key).cloned().ok_or_else(|| not_open(handle))
}

/// Takes the group behind a handle out of the table, for closing: refused while another
/// thread is inside a call on it (`ETHBCAST_ERR_BUSY`, the handle stays open).
pub(crate) fn unregister(handle: *const EthbcastGroup) -> Result<EthbcastGroup, Failure> {
    let key = key_of(handle)?;
    let mut table = groups();
    let busy = Arc::strong_count(table.get(key).ok_or_else(|| not_open(handle))?) > 1;
    if busy {
        return Err(Failure {
            code: ETHBCAST_ERR_BUSY,
            message: "another thread is inside a call on this group: close it once that call has returned".into(),
        });
    }
    let entry = table.remove(key).ok_or_else(|| not_open(handle))?;
    drop(table);
    // Calls take their reference under the table's lock, and the entry is gone from it.
    Arc::try_unwrap(entry).map_err(|_| Failure {
        code: ETHBCAST_ERR_INTERNAL,
        message: "internal error (a bug in ethbcast): a closed group is still in use".into(),
    })
}

/// Runs the call `f` on the group behind `group` under [`guard`]; a NULL handle is
/// `ETHBCAST_ERR_INVALID`, a closed or foreign one `ETHBCAST_ERR_HANDLE`.
pub(crate) fn on_group(
    group: *const EthbcastGroup,
    f: impl FnOnce(&EthbcastGroup) -> Result<(), Failure>,
) -> c_int {
    guard(|| f(lookup(group)?.as_ref()))
}

/// `f` of the group behind `group`, or -1 (with the last error) for a handle that is NULL,
/// closed or foreign (the queries that return a number).
pub(crate) fn query(group: *const EthbcastGroup, f: impl FnOnce(&EthbcastGroup) -> c_int) -> c_int {
    match lookup(group) {
        Ok(g) => f(&g),
        Err(failure) => {
            set_last_error(&failure.message);
            -1
        }
    }
}
