//! Test tool (feature `sim`): make the kernel refuse io_uring to this
//! process from now on, as a container runtime's default seccomp profile
//! does, so that the fallback from `Backend::Auto` and the error of an
//! explicit io_uring backend are tested against a real refusal.

use std::io;

/// Install a seccomp filter on the calling thread (and every thread it
/// creates afterwards) under which `io_uring_setup(2)` fails with `EPERM`
/// and every other system call is allowed. Irreversible for the thread:
/// call it in a child process made for the test. Cost: two `prctl`s.
///
/// The filter matches the system call number of the native ABI only; a
/// 32-bit compat call of the same number is not filtered, which a test
/// process never makes.
#[cfg(target_os = "linux")]
pub fn forbid_io_uring() -> io::Result<()> {
    use libc::{
        sock_filter, sock_fprog, BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, EPERM,
        SECCOMP_MODE_FILTER, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO,
    };
    let stmt = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // The system call number: `seccomp_data.nr`, at offset 0.
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        sock_filter {
            code: (BPF_JMP | BPF_JEQ | BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM as u32),
        stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    ];
    let prog = sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut sock_filter,
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `filter`, both alive for the call; the
    // kernel copies the program before returning.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Elsewhere there is no io_uring to refuse.
#[cfg(not(target_os = "linux"))]
pub fn forbid_io_uring() -> io::Result<()> {
    Ok(())
}
