//! The owning libipset session: every FFI call of the crate lives here.
use std::ffi::{CStr, CString, c_char, c_void};
use std::net::IpAddr;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, Once};

use crate::entry::{Entry, Member, check_comment};
use crate::error::{Error, ParseError, Result};
use crate::name::SetName;
use crate::op::Op;
use crate::set::{Family, Header, Set, SetType};
use crate::sys;
use crate::text::parse_save;

/// libipset keeps process-wide state: the registry of set types (whose entries it marks
/// as supported or not by the kernel) and a cache of set names to types. Every call into
/// libipset, from every [`Session`], holds this lock.
static LIBIPSET: Mutex<()> = Mutex::new(());
static LOAD_TYPES: Once = Once::new();

fn lock() -> MutexGuard<'static, ()> {
    // The guarded data is `()`: a panic while it was held leaves nothing inconsistent in Rust.
    LIBIPSET
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Called by the C shim with text libipset printed; copies it into the session's buffer.
///
/// # Safety
/// `ctx` must be the session's `*mut Vec<u8>` and `buf` must point to `len` readable bytes.
unsafe extern "C" fn write_output(ctx: *mut c_void, buf: *const c_char, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: ctx is the Vec registered in Session::new, alive until Session's Drop, and only
    // touched here while libipset runs inside a Session method (no other reference is live).
    let out = unsafe { &mut *ctx.cast::<Vec<u8>>() };
    // SAFETY: the shim passes a buffer of `len` bytes valid for the duration of this call.
    let text = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    out.extend_from_slice(text);
}

/// A connection to the kernel's ipset subsystem through libipset.
///
/// # Network namespaces
/// The netlink socket is opened by [`Session::new`] in the network namespace of the calling
/// thread, and the session keeps talking to that namespace whichever thread uses it later.
/// One exception: if listing a single set fails in the kernel (the set vanished between this
/// crate's existence check and the dump), libipset loses step with the kernel's replies and
/// the session reopens its socket, in the namespace of the thread making that call.
///
/// # Threads
/// A `Session` is [`Send`] (it can move to another thread) but not [`Sync`]: libipset's session
/// holds per-command state (the data blob, the restore buffer, the report), so every method
/// takes `&mut self`. Sessions on different threads may run at the same time: calls into
/// libipset are serialized by a process-wide lock, because libipset keeps process-global state
/// (its set-type registry and a set-name cache, which this crate empties at the start of each
/// call so that another namespace or another program cannot make it stale).
///
/// # Batches
/// [`Session::apply`] sends a list of [`Op`]s in libipset's restore mode: consecutive `Add` or
/// `Del` operations on one set share a netlink message (up to a page each), so thousands of
/// entries cost a handful of round trips. [`Session::replace`] swaps a whole set atomically.
pub struct Session {
    raw: NonNull<sys::ipset_session>,
    /// Handed to the C shim; freed in Drop after the C session.
    sink: *mut sys::ipset_rs_sink,
    /// Output printed by libipset (list/save); the sink's context.
    out: *mut Vec<u8>,
    /// Whether `-exist` semantics are on.
    exist: bool,
}

// SAFETY: the session's pointers are owned by it alone (nothing else holds them); libipset's
// session keeps no thread-local state and its netlink socket may be used from any thread. All
// access goes through `&mut self` with the process-wide LIBIPSET lock held, so moving a
// Session to another thread cannot race with anything.
unsafe impl Send for Session {}

/// Which command an operation is, for libipset.
fn cmd_of(op: &Op) -> sys::ipset_cmd {
    match op {
        Op::Create(_) => sys::IPSET_CMD_CREATE,
        Op::Destroy(_) => sys::IPSET_CMD_DESTROY,
        Op::Flush(_) => sys::IPSET_CMD_FLUSH,
        Op::Rename { .. } => sys::IPSET_CMD_RENAME,
        Op::Swap { .. } => sys::IPSET_CMD_SWAP,
        Op::Add { .. } => sys::IPSET_CMD_ADD,
        Op::Del { .. } => sys::IPSET_CMD_DEL,
    }
}

/// An address as libipset's `union nf_inet_addr` expects it (network order).
fn addr_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a.octets());
            b
        }
        IpAddr::V6(a) => a.octets(),
    }
}

/// Splits libipset's "Error in line N: " restore prefix off a report.
fn split_lineno(message: &str) -> (Option<usize>, &str) {
    if let Some((n, msg)) = message
        .strip_prefix("Error in line ")
        .and_then(|rest| rest.split_once(": "))
        && let Ok(n) = n.parse()
    {
        return (Some(n), msg);
    }
    (None, message)
}

impl Session {
    /// Opens a session: allocates libipset's session, opens its netlink socket in the calling
    /// thread's network namespace and checks the kernel's protocol version.
    pub fn new() -> Result<Self> {
        let _guard = lock();
        // SAFETY: ipset_load_types only registers libipset's static type descriptions; it runs
        // once, under the lock that guards all libipset state.
        LOAD_TYPES.call_once(|| unsafe { sys::ipset_load_types() });
        let out = Box::into_raw(Box::new(Vec::<u8>::new()));
        let sink = Box::into_raw(Box::new(sys::ipset_rs_sink {
            write: Some(write_output),
            ctx: out.cast(),
        }));
        // SAFETY: sink points to a live ipset_rs_sink that stays at this address until Drop,
        // which finalizes the C session before freeing it.
        let raw = unsafe { sys::ipset_rs_session_init(sink) };
        let Some(raw) = NonNull::new(raw) else {
            // SAFETY: both were made by Box::into_raw above and never shared with C.
            unsafe {
                drop(Box::from_raw(sink));
                drop(Box::from_raw(out));
            }
            return Err(Error::Session {
                message: "libipset could not allocate a session".into(),
            });
        };
        let mut session = Session {
            raw,
            sink,
            out,
            exist: false,
        };
        session.reset();
        // IPSET_CMD_NONE: open the socket and check the protocol version only.
        // SAFETY: raw is a live session owned by `session`; the lock is held.
        let ret = unsafe { sys::ipset_cmd(session.raw.as_ptr(), sys::IPSET_CMD_NONE, 0) };
        if ret < 0 {
            return Err(Error::Session {
                message: session.report(),
            });
        }
        Ok(session)
    }

    /// Turns `-exist` semantics on or off (off by default): creating a set that exists with
    /// the same options, adding an entry that is present and deleting one that is absent
    /// then succeed (the kernel ignores them) instead of failing.
    pub fn set_exist(&mut self, on: bool) {
        let _guard = lock();
        self.exist = on;
        // SAFETY: live session, lock held.
        unsafe {
            if on {
                sys::ipset_envopt_set(self.raw.as_ptr(), sys::IPSET_ENV_EXIST);
            } else {
                sys::ipset_envopt_unset(self.raw.as_ptr(), sys::IPSET_ENV_EXIST);
            }
        }
    }

    /// Whether `-exist` semantics are on.
    pub fn exist(&self) -> bool {
        self.exist
    }

    // ---- one command each: the `ipset` tool's subcommands ----

    /// `ipset create`.
    pub fn create(&mut self, header: &Header) -> Result<()> {
        self.apply_one(&Op::Create(header.clone()))
    }

    /// `ipset destroy NAME`.
    pub fn destroy(&mut self, set: &SetName) -> Result<()> {
        self.apply_one(&Op::Destroy(set.clone()))
    }

    /// `ipset flush NAME`.
    pub fn flush(&mut self, set: &SetName) -> Result<()> {
        self.apply_one(&Op::Flush(set.clone()))
    }

    /// `ipset rename FROM TO`.
    pub fn rename(&mut self, from: &SetName, to: &SetName) -> Result<()> {
        self.apply_one(&Op::Rename {
            from: from.clone(),
            to: to.clone(),
        })
    }

    /// `ipset swap FIRST SECOND`: exchanges the contents under the two names atomically.
    pub fn swap(&mut self, first: &SetName, second: &SetName) -> Result<()> {
        self.apply_one(&Op::Swap {
            first: first.clone(),
            second: second.clone(),
        })
    }

    /// `ipset add NAME ENTRY [options]`.
    pub fn add(&mut self, set: &SetName, member: impl Into<Member>) -> Result<()> {
        self.apply_one(&Op::Add {
            set: set.clone(),
            member: member.into(),
        })
    }

    /// `ipset del NAME ENTRY`.
    pub fn del(&mut self, set: &SetName, entry: Entry) -> Result<()> {
        self.apply_one(&Op::Del {
            set: set.clone(),
            entry,
        })
    }

    /// `ipset test NAME ENTRY`: whether the entry is in the set.
    ///
    /// The answer comes from the kernel's result code as libipset classifies it (success, or
    /// the "notice" it reports for `IPSET_ERR_EXIST` on a test), never from its text.
    pub fn test(&mut self, set: &SetName, entry: Entry) -> Result<bool> {
        let _guard = lock();
        self.reset();
        let op = Op::Del {
            set: set.clone(),
            entry,
        };
        match self.stage_entry(set, &entry, None) {
            Ok(()) => {}
            Err(Staged::Ours(e)) => {
                self.clear_data();
                return Err(e);
            }
            Err(Staged::Kernel) => return Err(self.classify(&op, sys::IPSET_CMD_TEST)),
        }
        // SAFETY: live session, lock held; the data blob was filled by stage_entry.
        let ret = unsafe { sys::ipset_cmd(self.raw.as_ptr(), sys::IPSET_CMD_TEST, 0) };
        if ret == 0 {
            return Ok(true);
        }
        // SAFETY: live session, lock held.
        let kind = unsafe { sys::ipset_session_report_type(self.raw.as_ptr()) };
        if kind == sys::IPSET_NOTICE {
            return Ok(false);
        }
        Err(self.classify(&op, sys::IPSET_CMD_TEST))
    }

    // ---- batches ----

    /// Applies `ops` in order, in libipset's restore mode.
    ///
    /// Consecutive `Add`/`Del` operations on the same set travel together, many per netlink
    /// message; other operations flush the pending message and go alone. On failure, the
    /// error is [`Error::Batch`] with the index of the failing operation; operations before it
    /// have been applied, those after it have not. The batch is not atomic: use
    /// [`Session::replace`] to change a whole set atomically.
    pub fn apply(&mut self, ops: &[Op]) -> Result<()> {
        for (index, op) in ops.iter().enumerate() {
            precheck(op).map_err(|e| Error::Batch {
                index,
                source: Box::new(e),
            })?;
        }
        let _guard = lock();
        self.reset();
        let mut failed = None;
        for (index, op) in ops.iter().enumerate() {
            let lineno = u32::try_from(index + 1).unwrap_or(u32::MAX);
            // Errors found while preparing op `index` (before the kernel saw it) are ours.
            // SAFETY: live session, lock held.
            unsafe { sys::ipset_session_lineno(self.raw.as_ptr(), lineno) };
            match self.stage(op, lineno) {
                Ok(()) => {}
                Err(Staged::Ours(e)) => {
                    failed = Some((index, e));
                    break;
                }
                Err(Staged::Kernel) => {
                    let e = self.batch_error(ops, index);
                    // A failed type lookup leaves earlier operations buffered: send them, so
                    // that "operations before the failing one were applied" holds.
                    // SAFETY: live session, lock held.
                    if unsafe { sys::ipset_commit(self.raw.as_ptr()) } < 0 {
                        return Err(self.batch_error(ops, index));
                    }
                    return Err(e);
                }
            }
        }
        // SAFETY: live session, lock held.
        let ret = unsafe { sys::ipset_commit(self.raw.as_ptr()) };
        if ret < 0 {
            let last = ops.len().saturating_sub(1);
            return Err(self.batch_error(ops, last));
        }
        match failed {
            Some((index, source)) => Err(Error::Batch {
                index,
                source: Box::new(source),
            }),
            None => Ok(()),
        }
    }

    /// Replaces the set named `set.header.name` with `set`, atomically for packet matching:
    /// fills a temporary set (named from the target, see [`temp_name`]), then swaps it in and
    /// destroys the old contents, or renames it if the target did not exist.
    ///
    /// The kernel swaps only sets of the same type and family; a differing existing set makes
    /// this fail with [`Error::Refused`], leaving the target untouched.
    pub fn replace(&mut self, set: &Set) -> Result<()> {
        let name = &set.header.name;
        let tmp = temp_name(name);
        if self.exists(&tmp)? {
            self.destroy(&tmp)?;
        }
        let mut header = set.header.renamed(tmp.clone());
        header.initval = None;
        let mut ops = Vec::with_capacity(set.members.len() + 1);
        ops.push(Op::Create(header));
        ops.extend(set.members.iter().map(|m| Op::Add {
            set: tmp.clone(),
            member: m.clone(),
        }));
        if let Err(e) = self.apply(&ops) {
            // Best effort: the temporary set may not exist if its create failed.
            let _ = self.destroy(&tmp);
            return Err(e);
        }
        if self.exists(name)? {
            if let Err(e) = self.swap(&tmp, name) {
                let _ = self.destroy(&tmp);
                return Err(e);
            }
            self.destroy(&tmp)
        } else {
            self.rename(&tmp, name)
        }
    }

    // ---- reading ----

    /// `ipset save`: every set in the namespace with its members.
    ///
    /// Fails with [`Error::Parse`] if a set has a type or option this crate does not model;
    /// use [`Session::save_set`] to read the sets you own.
    pub fn save(&mut self) -> Result<Vec<Set>> {
        let text = self.save_text(None)?;
        Ok(parse_save(&text)?)
    }

    /// `ipset save NAME`: one set with its members.
    pub fn save_set(&mut self, set: &SetName) -> Result<Set> {
        let text = self.save_text(Some(set))?;
        parse_save(&text)?
            .pop()
            .ok_or_else(|| ParseError::new("a set in the save output", text).into())
    }

    /// `ipset save [NAME]` as libipset prints it, unparsed (any set type).
    pub fn save_text(&mut self, set: Option<&SetName>) -> Result<String> {
        self.list(sys::IPSET_LIST_SAVE, sys::IPSET_CMD_SAVE, 0, set)
    }

    /// `ipset list -name`: the names of all sets in the namespace.
    pub fn names(&mut self) -> Result<Vec<SetName>> {
        let text = self.list(
            sys::IPSET_LIST_PLAIN,
            sys::IPSET_CMD_LIST,
            sys::IPSET_ENV_LIST_SETNAME,
            None,
        )?;
        text.lines()
            .filter(|l| !l.is_empty())
            .map(SetName::new)
            .collect()
    }

    /// `ipset list -terse NAME`: the set's header, or `None` if there is no such set.
    pub fn header(&mut self, set: &SetName) -> Result<Option<Header>> {
        Ok(self.info(set)?.map(|i| i.header))
    }

    /// `ipset list -terse NAME`: the header with the kernel's counts, or `None` if absent.
    pub fn info(&mut self, set: &SetName) -> Result<Option<SetInfo>> {
        let text = match self.list(
            sys::IPSET_LIST_PLAIN,
            sys::IPSET_CMD_LIST,
            sys::IPSET_ENV_LIST_HEADER,
            Some(set),
        ) {
            Ok(text) => text,
            Err(Error::SetMissing { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        SetInfo::parse_terse(set, &text)
            .map(Some)
            .map_err(Error::from)
    }

    /// Whether a set of that name exists (one non-dump request: libipset's `HEADER`).
    pub fn exists(&mut self, set: &SetName) -> Result<bool> {
        let _guard = lock();
        self.exists_locked(set)
    }

    // ---- internals (all called with the lock held) ----

    fn exists_locked(&mut self, set: &SetName) -> Result<bool> {
        self.reset();
        self.set_str(sys::IPSET_SETNAME, &set.to_c());
        // SAFETY: live session, lock held; SETNAME is set as HEADER requires.
        let ret = unsafe { sys::ipset_cmd(self.raw.as_ptr(), sys::IPSET_CMD_HEADER, 0) };
        self.clear_data();
        if ret == 0 {
            return Ok(true);
        }
        match self.classify(&Op::Flush(set.clone()), sys::IPSET_CMD_HEADER) {
            Error::SetMissing { .. } => Ok(false),
            other => Err(other),
        }
    }

    /// Replaces the C session with a new one (same output sink, same `-exist` setting).
    ///
    /// Needed after a failed dump of one set: the kernel then acknowledges the request twice
    /// and libipset reads only the first, so every later reply would be one behind (the
    /// `ipset` tool's interactive mode shows the same "Internal protocol error"). The new
    /// socket is opened in the calling thread's network namespace.
    fn reopen(&mut self) {
        // SAFETY: sink is live and at a fixed address until Drop; the lock is held.
        let fresh = unsafe { sys::ipset_rs_session_init(self.sink) };
        let Some(fresh) = NonNull::new(fresh) else {
            return;
        };
        // SAFETY: the old session is owned and no longer used after this; the new one is live.
        unsafe {
            sys::ipset_session_fini(self.raw.as_ptr());
            self.raw = fresh;
            if self.exist {
                sys::ipset_envopt_set(self.raw.as_ptr(), sys::IPSET_ENV_EXIST);
            }
            sys::ipset_cmd(self.raw.as_ptr(), sys::IPSET_CMD_NONE, 0);
        }
    }

    fn apply_one(&mut self, op: &Op) -> Result<()> {
        precheck(op)?;
        let _guard = lock();
        self.reset();
        match self.stage(op, 0) {
            Ok(()) => Ok(()),
            Err(Staged::Ours(e)) => Err(e),
            Err(Staged::Kernel) => Err(self.classify(op, cmd_of(op))),
        }
    }

    fn list(
        &mut self,
        mode: sys::ipset_output_mode,
        cmd: sys::ipset_cmd,
        env: sys::ipset_envopt,
        set: Option<&SetName>,
    ) -> Result<String> {
        let _guard = lock();
        // A dump of one missing set would desynchronize libipset (see `reopen`): check first.
        if let Some(set) = set
            && !self.exists_locked(set)?
        {
            return Err(Error::SetMissing {
                set: set.to_string(),
                message: "The set with the given name does not exist".into(),
            });
        }
        self.reset();
        let raw = self.raw.as_ptr();
        // SAFETY: live session, lock held; the name is a NUL-terminated copy that outlives the
        // call (libipset copies it into its data blob).
        let ret = unsafe {
            sys::ipset_session_output(raw, mode);
            if env != 0 {
                sys::ipset_envopt_set(raw, env);
            }
            let name = set.map(SetName::to_c);
            if let Some(name) = &name {
                sys::ipset_data_set(
                    sys::ipset_session_data(raw),
                    sys::IPSET_SETNAME,
                    name.as_ptr().cast(),
                );
            }
            let ret = sys::ipset_cmd(raw, cmd, 0);
            if env != 0 {
                sys::ipset_envopt_unset(raw, env);
            }
            sys::ipset_session_output(raw, sys::IPSET_LIST_NONE);
            ret
        };
        // SAFETY: the output buffer is only written by write_output during ipset_cmd, which
        // has returned; no other reference to it exists.
        let bytes = std::mem::take(unsafe { &mut *self.out });
        if ret < 0 {
            let op = Op::Flush(
                set.cloned()
                    .unwrap_or_else(|| SetName::new("-").expect("valid")),
            );
            let err = self.classify(&op, cmd);
            if set.is_some() {
                self.reopen();
            }
            return Err(err);
        }
        String::from_utf8(bytes).map_err(|e| {
            ParseError::new("UTF-8 output", String::from_utf8_lossy(e.as_bytes())).into()
        })
    }

    /// Fills libipset's data blob for `op` and runs it (buffered in restore mode).
    fn stage(&mut self, op: &Op, lineno: u32) -> Result<(), Staged> {
        match op {
            Op::Create(h) => self.stage_create(h)?,
            Op::Destroy(s) | Op::Flush(s) => self.set_str(sys::IPSET_SETNAME, &s.to_c()),
            Op::Rename { from, to } => {
                self.set_str(sys::IPSET_SETNAME, &from.to_c());
                self.set_str(sys::IPSET_OPT_SETNAME2, &to.to_c());
            }
            Op::Swap { first, second } => {
                self.set_str(sys::IPSET_SETNAME, &first.to_c());
                self.set_str(sys::IPSET_OPT_SETNAME2, &second.to_c());
            }
            Op::Add { set, member } => {
                let staged = self.stage_entry(set, &member.entry, Some(member));
                if staged.is_err() {
                    self.clear_data();
                }
                staged?
            }
            Op::Del { set, entry } => {
                let staged = self.stage_entry(set, entry, None);
                if staged.is_err() {
                    self.clear_data();
                }
                staged?
            }
        }
        // SAFETY: live session, lock held; the data blob holds everything the command needs.
        let ret = unsafe { sys::ipset_cmd(self.raw.as_ptr(), cmd_of(op), lineno) };
        if ret < 0 { Err(Staged::Kernel) } else { Ok(()) }
    }

    fn stage_create(&mut self, h: &Header) -> Result<(), Staged> {
        self.set_str(sys::IPSET_SETNAME, &h.name.to_c());
        let type_name = CString::new(h.set_type.name()).expect("no NUL in type names");
        self.set_str(sys::IPSET_OPT_TYPENAME, &type_name);
        if h.set_type.has_family() {
            self.set_val(sys::IPSET_OPT_FAMILY, &h.family.nfproto());
        }
        // Resolves the type (asking the kernel which revisions it supports).
        // SAFETY: live session, lock held; SETNAME, TYPENAME and FAMILY are set as required.
        let ty = unsafe { sys::ipset_type_get(self.raw.as_ptr(), sys::IPSET_CMD_CREATE) };
        if ty.is_null() {
            return Err(Staged::Kernel);
        }
        if let Some(n) = h.hashsize {
            self.set_val(sys::IPSET_OPT_HASHSIZE, &n);
        }
        if let Some(n) = h.maxelem {
            self.set_val(sys::IPSET_OPT_MAXELEM, &n);
        }
        if let Some(r) = h.range {
            self.set_val(sys::IPSET_OPT_PORT, &r.from);
            self.set_val(sys::IPSET_OPT_PORT_TO, &r.to);
        }
        if let Some(n) = h.timeout {
            self.set_val(sys::IPSET_OPT_TIMEOUT, &n);
        }
        // Flags: libipset reads no value, but wants a non-NULL pointer.
        if h.counters {
            self.set_val(sys::IPSET_OPT_COUNTERS, &1u32);
        }
        if h.comment {
            self.set_val(sys::IPSET_OPT_CREATE_COMMENT, &1u32);
        }
        if let Some(n) = h.bucketsize {
            self.set_val(sys::IPSET_OPT_BUCKETSIZE, &n);
        }
        if let Some(n) = h.initval {
            self.set_val(sys::IPSET_OPT_INITVAL, &n);
        }
        Ok(())
    }

    /// Fills the set name, resolves the set's type and family and fills the entry.
    fn stage_entry(
        &mut self,
        set: &SetName,
        entry: &Entry,
        member: Option<&Member>,
    ) -> Result<(), Staged> {
        self.set_str(sys::IPSET_SETNAME, &set.to_c());
        // Looks up the set's type and family in the kernel (HEADER), unless this batch created it.
        // SAFETY: live session, lock held; SETNAME is set as required.
        let ty = unsafe { sys::ipset_type_get(self.raw.as_ptr(), sys::IPSET_CMD_ADD) };
        if ty.is_null() {
            return Err(Staged::Kernel);
        }
        let data = self.data();
        // SAFETY: ty is a live entry of libipset's static type registry; its name is a static
        // NUL-terminated string.
        let type_name = unsafe { CStr::from_ptr((*ty).name) }
            .to_string_lossy()
            .into_owned();
        if type_name != entry.set_type().name() {
            return Err(Staged::Ours(Error::invalid(
                set,
                format!(
                    "entry {entry} is a {} entry but the set is {type_name}",
                    entry.set_type()
                ),
            )));
        }
        // SAFETY: data is the session's live data blob.
        let family = Family::from_nfproto(unsafe { sys::ipset_data_family(data) });
        if entry.family().is_some() && entry.family() != family {
            return Err(Staged::Ours(Error::invalid(
                set,
                format!("entry {entry} does not match the set's family"),
            )));
        }
        match *entry {
            Entry::Ip(ip) => self.set_addr(sys::IPSET_OPT_IP, ip),
            Entry::Net(net) => {
                self.set_addr(sys::IPSET_OPT_IP, net.addr());
                self.set_val(sys::IPSET_OPT_CIDR, &net.prefix());
            }
            Entry::IpPort { ip, protocol, port } => {
                self.set_addr(sys::IPSET_OPT_IP, ip);
                self.set_val(sys::IPSET_OPT_PROTO, &protocol.number());
                self.set_val(sys::IPSET_OPT_PORT, &port);
            }
            Entry::IpPortIp {
                ip,
                protocol,
                port,
                ip2,
            } => {
                self.set_addr(sys::IPSET_OPT_IP, ip);
                self.set_val(sys::IPSET_OPT_PROTO, &protocol.number());
                self.set_val(sys::IPSET_OPT_PORT, &port);
                self.set_addr(sys::IPSET_OPT_IP2, ip2);
            }
            Entry::IpPortNet {
                ip,
                protocol,
                port,
                net,
            } => {
                self.set_addr(sys::IPSET_OPT_IP, ip);
                self.set_val(sys::IPSET_OPT_PROTO, &protocol.number());
                self.set_val(sys::IPSET_OPT_PORT, &port);
                self.set_addr(sys::IPSET_OPT_IP2, net.addr());
                self.set_val(sys::IPSET_OPT_CIDR2, &net.prefix());
            }
            Entry::NetPort {
                net,
                protocol,
                port,
            } => {
                self.set_addr(sys::IPSET_OPT_IP, net.addr());
                self.set_val(sys::IPSET_OPT_CIDR, &net.prefix());
                self.set_val(sys::IPSET_OPT_PROTO, &protocol.number());
                self.set_val(sys::IPSET_OPT_PORT, &port);
            }
            Entry::Port(port) => self.set_val(sys::IPSET_OPT_PORT, &port),
        }
        if let Some(m) = member {
            let o = &m.options;
            if let Some(t) = o.timeout {
                self.set_val(sys::IPSET_OPT_TIMEOUT, &t);
            }
            if let Some(p) = o.packets {
                self.set_val(sys::IPSET_OPT_PACKETS, &p);
            }
            if let Some(b) = o.bytes {
                self.set_val(sys::IPSET_OPT_BYTES, &b);
            }
            if let Some(c) = &o.comment {
                let c = CString::new(c.as_str()).expect("checked: no NUL");
                self.set_str(sys::IPSET_OPT_ADT_COMMENT, &c);
            }
        }
        Ok(())
    }

    fn data(&self) -> *mut sys::ipset_data {
        // SAFETY: live session; the data blob lives as long as the session.
        unsafe { sys::ipset_session_data(self.raw.as_ptr()) }
    }

    /// Stores a plain value; `T` must be the C type libipset reads for `opt`.
    fn set_val<T: Copy>(&mut self, opt: sys::ipset_opt, value: &T) {
        // SAFETY: value points to a live T of the size libipset reads for opt (callers pass
        // u8/u16/u32/u64 as documented in data.h); libipset copies it before returning.
        unsafe { sys::ipset_data_set(self.data(), opt, (value as *const T).cast()) };
    }

    fn set_str(&mut self, opt: sys::ipset_opt, value: &CStr) {
        // SAFETY: a NUL-terminated string, copied (bounded) by libipset before returning.
        unsafe { sys::ipset_data_set(self.data(), opt, value.as_ptr().cast()) };
    }

    /// Stores an address; the data blob's family must already be the address's.
    fn set_addr(&mut self, opt: sys::ipset_opt, ip: IpAddr) {
        let bytes = addr_bytes(ip);
        // SAFETY: 16 readable bytes; libipset copies 4 or 16 of them by the blob's family.
        unsafe { sys::ipset_data_set(self.data(), opt, bytes.as_ptr().cast()) };
    }

    fn clear_data(&mut self) {
        // SAFETY: live data blob, lock held.
        unsafe { sys::ipset_data_reset(self.data()) };
    }

    /// Starts a call: empties libipset's set cache, the report and the output buffer.
    fn reset(&mut self) {
        // SAFETY: lock held (callers); a NULL name empties the process-wide cache, which only
        // speeds up type lookups and is refilled from the kernel on demand.
        unsafe {
            sys::ipset_cache_del(std::ptr::null());
            sys::ipset_session_report_reset(self.raw.as_ptr());
            sys::ipset_session_lineno(self.raw.as_ptr(), 0);
        }
        // SAFETY: C is not running; no other reference to the buffer exists.
        unsafe { (*self.out).clear() };
    }

    /// libipset's report, copied.
    fn report(&self) -> String {
        // SAFETY: live session; the report is a NUL-terminated buffer inside it, copied here
        // before any other libipset call can change it.
        let msg = unsafe { CStr::from_ptr(sys::ipset_session_report_msg(self.raw.as_ptr())) };
        msg.to_string_lossy().trim_end().to_string()
    }

    fn batch_error(&mut self, ops: &[Op], current: usize) -> Error {
        let (line, _) = split_lineno(&self.report());
        let index = line
            .and_then(|l| l.checked_sub(1))
            .filter(|i| *i < ops.len())
            .unwrap_or(current);
        let source = self.classify(&ops[index], cmd_of(&ops[index]));
        Error::Batch {
            index,
            source: Box::new(source),
        }
    }

    /// Turns the current report into a typed error.
    ///
    /// libipset turns the kernel's error code into a message and keeps only the message. To
    /// get the code back without hard-coding English text, ask libipset to render each
    /// candidate code for the command and compare with what it reported.
    fn classify(&mut self, op: &Op, cmd: sys::ipset_cmd) -> Error {
        let full = self.report();
        let (_, message) = split_lineno(&full);
        let message = message.to_string();
        let set = op.set().to_string();
        let entry = || match op {
            Op::Add { member, .. } => member.entry.to_string(),
            Op::Del { entry, .. } => entry.to_string(),
            _ => String::new(),
        };
        let exist = sys::IPSET_ERR_EXIST as i32;
        let setname2 = sys::IPSET_ERR_EXIST_SETNAME2 as i32;
        let candidates = [
            (cmd, libc::ENOENT),
            (sys::IPSET_CMD_HEADER, libc::ENOENT),
            (sys::IPSET_CMD_NONE, libc::ENOENT),
            (cmd, libc::EEXIST),
            (cmd, exist),
            (cmd, setname2),
        ];
        let mut code = None;
        for (c, candidate) in candidates {
            // SAFETY: live session, lock held; ipset_errcode only writes the session's report.
            unsafe {
                sys::ipset_session_report_reset(self.raw.as_ptr());
                sys::ipset_session_lineno(self.raw.as_ptr(), 0);
                sys::ipset_errcode(self.raw.as_ptr(), c, candidate);
            }
            if self.report() == message {
                code = Some(candidate);
                break;
            }
        }
        let kind = match (code, op) {
            (Some(libc::ENOENT), _) => Some(0),
            (Some(c), Op::Create(_)) if c == libc::EEXIST || c == exist => Some(1),
            (Some(c), Op::Rename { .. }) if c == setname2 => Some(2),
            (Some(c), Op::Swap { .. }) if c == setname2 => Some(3),
            (Some(c), Op::Add { .. }) if c == exist => Some(4),
            (Some(c), Op::Del { .. }) if c == exist => Some(5),
            _ => None,
        };
        // SAFETY: live session, lock held.
        unsafe { sys::ipset_session_report_reset(self.raw.as_ptr()) };
        self.clear_data();
        match (kind, op) {
            (Some(0), _) => Error::SetMissing { set, message },
            (Some(1), _) => Error::SetExists { set, message },
            (Some(2), Op::Rename { to, .. }) => Error::SetExists {
                set: to.to_string(),
                message,
            },
            (Some(3), Op::Swap { second, .. }) => Error::SetMissing {
                set: second.to_string(),
                message,
            },
            (Some(4), _) => Error::EntryExists {
                set,
                entry: entry(),
                message,
            },
            (Some(5), _) => Error::EntryMissing {
                set,
                entry: entry(),
                message,
            },
            _ if message.is_empty() => Error::Refused {
                message: "libipset reported a failure without a message".into(),
            },
            _ => Error::Refused { message },
        }
    }
}

/// Why staging an operation failed.
enum Staged {
    /// A check of ours, before the kernel saw the operation.
    Ours(Error),
    /// libipset or the kernel refused: the report says why.
    Kernel,
}

impl From<Error> for Staged {
    fn from(e: Error) -> Self {
        Staged::Ours(e)
    }
}

/// Checks that need no kernel: header options, entry families, comments.
fn precheck(op: &Op) -> Result<()> {
    match op {
        Op::Create(h) => h.check().map_err(|r| Error::invalid(&h.name, r)),
        Op::Add { set, member } => {
            if !member.entry.is_consistent() {
                return Err(Error::invalid(set, "entry mixes IPv4 and IPv6"));
            }
            if let Some(c) = &member.options.comment {
                check_comment(c).map_err(|r| Error::invalid(set, r))?;
            }
            Ok(())
        }
        Op::Del { set, entry } if !entry.is_consistent() => {
            Err(Error::invalid(set, "entry mixes IPv4 and IPv6"))
        }
        _ => Ok(()),
    }
}

/// The temporary name [`Session::replace`] fills before swapping: the target's name cut to
/// 27 bytes, then `-tmp`. Deterministic, so a crashed replace's leftover is found and removed.
pub fn temp_name(name: &SetName) -> SetName {
    let mut base = name.as_str();
    let mut cut = base.len().min(crate::name::MAX_NAME_LEN - 4);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    base = &base[..cut];
    SetName::new(format!("{base}-tmp")).expect("at most 31 bytes, from a valid name")
}

/// A set's header with the kernel's bookkeeping, from `ipset list -terse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    /// Name, type and options.
    pub header: Header,
    /// Number of iptables rules (and list sets) referring to the set.
    pub references: u32,
    /// Number of entries.
    pub entries: u32,
}

impl SetInfo {
    fn parse_terse(name: &SetName, text: &str) -> Result<Self, ParseError> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
                .ok_or_else(|| ParseError::new(format!("a {key} line"), text))
        };
        let set_type: SetType = field("Type:")?.parse()?;
        let header = Header::parse_options(name.clone(), set_type, field("Header:")?)?;
        let num = |key: &str| -> Result<u32, ParseError> {
            let v = field(key)?;
            v.parse().map_err(|_| ParseError::new("a number", v))
        };
        Ok(SetInfo {
            header,
            references: num("References:")?,
            entries: num("Number of entries:")?,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _guard = lock();
        // SAFETY: raw is live and owned; after fini nothing refers to sink or out, which were
        // made by Box::into_raw in new() and are freed exactly once here.
        unsafe {
            sys::ipset_session_fini(self.raw.as_ptr());
            drop(Box::from_raw(self.sink));
            drop(Box::from_raw(self.out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_fit() {
        let long = SetName::new("K".repeat(31)).unwrap();
        assert_eq!(temp_name(&long).as_str(), format!("{}-tmp", "K".repeat(27)));
        let short = SetName::new("KUBE-CLUSTER-IP").unwrap();
        assert_eq!(temp_name(&short).as_str(), "KUBE-CLUSTER-IP-tmp");
        let wide = SetName::new("é".repeat(15)).unwrap();
        assert!(temp_name(&wide).as_str().len() <= 31);
    }

    #[test]
    fn lineno_prefix_is_split() {
        assert_eq!(split_lineno("Error in line 7: boom"), (Some(7), "boom"));
        assert_eq!(split_lineno("boom"), (None, "boom"));
    }

    #[test]
    fn terse_listing_parses() {
        let text = "Name: c\nType: hash:ip,port\nRevision: 7\nHeader: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x8a737c2d\nSize in memory: 360\nReferences: 2\nNumber of entries: 3\n";
        let info = SetInfo::parse_terse(&SetName::new("c").unwrap(), text).unwrap();
        assert_eq!(info.references, 2);
        assert_eq!(info.entries, 3);
        assert_eq!(info.header.hashsize, Some(1024));
    }
}
