use std::io;
#[cfg(target_os = "linux")]
use std::os::unix::io::RawFd;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A level-triggered wake-up for a thread that sleeps in the kernel.
///
/// Linux: an eventfd, which the io_uring queue can also poll, so the I/O
/// thread sleeps in exactly one place for both producer wake-ups and
/// completions. macOS: a kqueue with one `EVFILT_USER` event.
///
/// Cost: [`notify`](Self::notify) is one syscall; callers avoid it when the
/// I/O thread is known to be awake. Wake-ups coalesce: many notifies before
/// a wait count as one.
#[derive(Debug)]
pub struct Notifier {
    fd: OwnedFd,
    /// Set by [`fail_from_now`](Self::fail_from_now): a test tool.
    #[cfg(feature = "sim")]
    failing: std::sync::atomic::AtomicBool,
}

impl Notifier {
    /// Create a notifier. Cost: one syscall (two on macOS).
    pub fn new() -> io::Result<Notifier> {
        Self::create()
    }

    #[cfg(target_os = "linux")]
    fn create() -> io::Result<Notifier> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Notifier {
            fd,
            #[cfg(feature = "sim")]
            failing: Default::default(),
        })
    }

    #[cfg(target_os = "macos")]
    fn create() -> io::Result<Notifier> {
        // SAFETY: kqueue takes no arguments; the result is checked below.
        let kq = unsafe { libc::kqueue() };
        if kq < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: kq is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(kq) };
        let n = Notifier {
            fd,
            #[cfg(feature = "sim")]
            failing: Default::default(),
        };
        n.kevent(libc::EV_ADD | libc::EV_CLEAR, 0)?;
        Ok(n)
    }

    #[cfg(target_os = "macos")]
    fn kevent(&self, flags: u16, fflags: u32) -> io::Result<()> {
        // SAFETY: an all-zero kevent is a valid value of this plain C struct.
        let mut ev: libc::kevent = unsafe { std::mem::zeroed() };
        ev.ident = 1;
        ev.filter = libc::EVFILT_USER;
        ev.flags = flags;
        ev.fflags = fflags;
        // SAFETY: one valid changelist entry, no eventlist.
        let rc = unsafe {
            libc::kevent(
                self.fd.as_raw_fd(),
                &ev,
                1,
                std::ptr::null_mut(),
                0,
                std::ptr::null(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Make every later [`notify`](Self::notify) fail, as a wake-up the
    /// kernel refused would: a test tool (feature `sim`) for what a
    /// caller does when its waiter cannot be reached.
    #[cfg(feature = "sim")]
    pub fn fail_from_now(&self) {
        self.failing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Wake the waiter (now, or at its next wait if it is not sleeping).
    /// Fails only if the kernel refuses the wake-up (a descriptor gone
    /// bad, or on macOS a kqueue out of memory): the waiter then cannot
    /// be reached, and the caller must treat it as lost.
    pub fn notify(&self) -> io::Result<()> {
        #[cfg(feature = "sim")]
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        #[cfg(target_os = "linux")]
        {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            // EAGAIN means the counter is saturated: a wake-up is pending anyway.
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        #[cfg(target_os = "macos")]
        {
            self.kevent(0, libc::NOTE_TRIGGER)
        }
    }

    /// Consume a pending wake-up without blocking; true if there was one.
    pub fn drain(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            n == 8
        }
        #[cfg(target_os = "macos")]
        {
            self.wait(Some(Duration::ZERO)).unwrap_or(false)
        }
    }

    /// Sleep until notified or until `timeout` passes (`None`: forever).
    /// Returns true if a wake-up was consumed.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
            // SAFETY: one valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                return if err.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(err)
                };
            }
            Ok(self.drain())
        }
        #[cfg(target_os = "macos")]
        {
            // SAFETY: an all-zero kevent is a valid value of this plain C struct.
            let mut ev: libc::kevent = unsafe { std::mem::zeroed() };
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let tsp = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: no changelist, one eventlist slot we own, optional timeout.
            let rc =
                unsafe { libc::kevent(self.fd.as_raw_fd(), std::ptr::null(), 0, &mut ev, 1, tsp) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                return if err.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(err)
                };
            }
            Ok(rc > 0)
        }
    }

    /// The descriptor, for the io_uring queue to poll.
    #[cfg(target_os = "linux")]
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn notify_wakes_and_coalesces() {
        let n = Arc::new(Notifier::new().unwrap());
        assert!(!n.wait(Some(Duration::from_millis(1))).unwrap());
        n.notify().unwrap();
        n.notify().unwrap();
        assert!(n.wait(None).unwrap());
        assert!(!n.drain(), "two notifies before a wait coalesce into one");
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.wait(None).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        n.notify().unwrap();
        assert!(t.join().unwrap());
    }
}
