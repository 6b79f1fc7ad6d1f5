//! Threads that carry their name from the moment they exist. std names a thread from inside it,
//! once it first runs; until the scheduler gets to it, it shows its creator's name. On a loaded
//! machine, and with `--cpus` putting every gilsample thread on one CPU a busy job also uses, the
//! trace writer could still read as a second `sample-PID` in `top -H` or a profile after the
//! recording had said it started.

use std::ffi::CString;
use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::thread::{self, JoinHandle};

/// The longest thread name Linux keeps, in bytes (16 with the terminating NUL).
const MAX_NAME_BYTES: usize = 15;

/// Spawns `f` on a thread named `name`, named from here as well as from inside it, so that the name
/// is in place when this returns.
pub fn spawn_named<F, T>(name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let handle = thread::Builder::new().name(name.clone()).spawn(f)?;
    let mut end = name.len().min(MAX_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    if let Ok(kernel_name) = CString::new(&name[..end]) {
        // SAFETY: the handle is neither joined nor detached, so its pthread_t names a live thread
        // or one not yet joined; the name is NUL-terminated and within the kernel's 16 bytes. A
        // failure leaves the name std sets from inside the thread, as before.
        unsafe { libc::pthread_setname_np(handle.as_pthread_t(), kernel_name.as_ptr()) };
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of this process's threads, as the kernel has them.
    fn thread_names() -> Vec<String> {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap().flatten();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .collect()
    }

    #[test]
    fn the_name_is_in_place_before_the_thread_first_runs() {
        // This thread on one CPU at a real-time priority: the new thread inherits both, and cannot
        // run before this one sleeps, so whatever name it has when spawn_named returns was given
        // from here (as the sampler thread, SCHED_FIFO, starts the trace writer). Needs root, as
        // the tests do.
        let cpu = nix::sched::sched_getcpu().unwrap();
        let mut one = nix::sched::CpuSet::new();
        one.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).unwrap();
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: a plain call on this thread with a valid parameter.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        assert_eq!(rc, 0, "SCHED_FIFO: {}", io::Error::last_os_error());
        let handle = spawn_named("named-test-42".to_string(), || ()).unwrap();
        let names = thread_names();
        let other = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &other) };
        handle.join().unwrap();
        assert!(names.iter().any(|n| n == "named-test-42"), "{names:?}");
    }

    #[test]
    fn a_long_name_is_cut_to_what_the_kernel_keeps() {
        let handle = spawn_named("write-12345678901234".to_string(), || {
            let tid = nix::unistd::gettid().as_raw();
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap()
        })
        .unwrap();
        assert_eq!(handle.join().unwrap().trim(), "write-123456789");
    }
}
