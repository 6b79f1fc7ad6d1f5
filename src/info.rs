//! `gilsample info`: what a support request needs to know about a target, from one look at it.

use std::fmt::Write;

use crate::error::{Error, Result};
use crate::infer::engine::Engine;
use crate::infer::sample::{Sample, SampleContext, ThreadSample};
use crate::launch::{exe_of, given_pid_not_python};
use crate::observed::KernelState;
use crate::observed::{GilWaitRanges, in_range};
use crate::process::kernel::ThreadFiles;
use crate::process::tasks::{TidMap, read_namespace_pid};
use crate::python::attach::{LayoutChoice, attach};
use crate::python::names::ThreadNamer;
use crate::python::target::Target;
use crate::python::thread_list::ThreadWalker;
use crate::sampler::config::SamplerConfig;

/// What `gilsample info` prints for process `pid`: attaches with `choice` and describes the
/// interpreter, its layout, GIL, threads and what the sampler would read.
pub fn describe(pid: u32, choice: LayoutChoice) -> Result<String> {
    let target = attach(pid, choice).map_err(|e| match e {
        Error::NotPython { pid, why } => Error::NotPython {
            pid,
            why: given_pid_not_python(&why, exe_of(pid).as_deref(), false),
        },
        e => e,
    })?;
    let mut out = String::new();
    write_target_lines(&mut out, pid, &target);
    // One read for the words, the counts and the mutex, so that the lines below agree.
    let read = target.read_gil(target.waiter_counts.as_ref().ok());
    let reading = read.as_ref().ok();
    let word = reading.map(|r| r.word);
    let mutex_owner = reading.and_then(|r| r.mutex_owner);
    if let Some(w) = word {
        let _ = writeln!(
            out,
            "GIL state:      locked={} last_holder={} switch_number={}",
            w.locked, w.last_holder, w.switch_number
        );
    }
    let _ = writeln!(out, "GIL waiters:    {}", target.describe_waiters(read));
    let _ = writeln!(
        out,
        "GIL mutex:      {}",
        describe_mutex_owner(&target, mutex_owner)
    );
    let mut threads = Vec::new();
    target
        .walk_threads(&mut ThreadWalker::default(), &mut threads)
        .map_err(|e| crate::error::Error::LayoutInvalid {
            pid,
            why: format!("{e:?}"),
        })?;
    let ranges = target.gil_wait_ranges();
    let mut tid_map = TidMap::new(pid)?;
    if tid_map.translates() {
        let _ = writeln!(
            out,
            "pid namespace:  another one (its pid {}); tids below are ours",
            read_namespace_pid(pid).unwrap_or(0)
        );
    }
    let _ = writeln!(out, "threads:        {}", threads.len());
    for t in &mut threads {
        t.tid = tid_map.to_ours(t.tid).unwrap_or(t.tid);
    }
    let mut names = std::collections::BTreeMap::new();
    ThreadNamer::new(target.object_reader()).name_threads(
        &target.memory,
        &target.layout,
        target.runtime,
        &threads,
        &mut names,
    );
    // Each thread decided by the engine the sampler uses, from this one sample (no history: the
    // rules that compare with an earlier sample have nothing to compare with).
    let kernels: Vec<Option<KernelState>> = threads
        .iter()
        .map(|t| {
            ThreadFiles::open(pid, t.tid)
                .ok()
                .and_then(|f| f.read_state().ok())
        })
        .collect();
    let sample = Sample {
        word: word.unwrap_or_default(),
        waiters: reading.and_then(|r| r.waiters),
        mutex_owner,
        all_kernel_read: true,
        threads: threads
            .iter()
            .zip(&kernels)
            .map(|(t, &kernel)| ThreadSample {
                tid: t.tid,
                their_tid: t.their_tid,
                tstate: t.tstate,
                kernel,
                ..ThreadSample::default()
            })
            .collect(),
        ..Sample::default()
    };
    let mut engine = Engine::new(SampleContext {
        period_ns: SamplerConfig::period_ns_at(10_000.0),
        ranges,
        waiter_counts: false,
        gil_flags: false,
        check_gil_flags: false,
    });
    engine.step(&sample, &mut |_| {});
    for (index, (t, &kernel)) in threads.iter().zip(&kernels).enumerate() {
        let state = engine
            .decided()
            .iter()
            .find(|d| d.index == index)
            .map_or_else(|| "undecided".to_string(), |d| d.state.to_string());
        let name = names.get(&t.tid).map(|n| format!("  name: {n}"));
        let _ = writeln!(
            out,
            "  tid {:>8}  tstate {}  {:<9} kernel: {}{}",
            t.tid,
            t.tstate,
            state,
            describe_kernel_state(kernel, &ranges),
            name.unwrap_or_default()
        );
    }
    Ok(out)
}

/// The binary, the interpreter and where its layout and GIL were found.
fn write_target_lines(out: &mut String, pid: u32, target: &Target) {
    let b = &target.binary;
    let _ = writeln!(out, "pid:            {pid}");
    let _ = writeln!(
        out,
        "binary:         {} ({})",
        b.mapped_path.display(),
        if b.shared_library {
            "shared libpython"
        } else {
            "executable"
        }
    );
    let _ = writeln!(out, "opened as:      {}", b.opened_as.display());
    let _ = writeln!(
        out,
        "build-id:       {}",
        b.build_id.as_deref().unwrap_or("none")
    );
    let _ = writeln!(
        out,
        "python:         {} ({}, {})",
        target.version, target.flavour, b.arch
    );
    let _ = writeln!(out, "layout source:  {}", target.layout_source);
    let _ = writeln!(
        out,
        "_PyRuntime:     {} (load bias {:#x})",
        target.runtime, b.load_bias
    );
    let _ = writeln!(out, "GIL:            {}", target.gil);
    let _ = writeln!(out, "thread ids via: {:?}", target.tids);
}

/// Who holds the GIL's mutex, as one read found it (`owner`), or why that is not known.
fn describe_mutex_owner(target: &crate::python::target::Target, owner: Option<u32>) -> String {
    match (&target.waiter_counts, owner) {
        (Err(why), _) => format!("not read: {why}"),
        (Ok(at), owner) => {
            let Some(place) = at.mutex() else {
                return "not read: the layout's gil.mutex is not a glibc pthread_mutex_t"
                    .to_string();
            };
            let state = match owner {
                Some(0) => "free".to_string(),
                Some(tid) => format!("held by thread {tid} (as the target numbers it)"),
                None => "unreadable now (its lock and owner words disagree)".to_string(),
            };
            format!("{state}; glibc pthread_mutex_t at {place}")
        }
    }
}

/// What the kernel says a thread is doing, in words: `running`, the system call it is blocked in
/// (`read`, `epoll_wait`), or for futex which of the GIL's words it sleeps on.
pub fn describe_kernel_state(kernel: Option<KernelState>, ranges: &GilWaitRanges) -> String {
    let Some(kernel) = kernel else {
        return "unreadable (the thread exited, or /proc refused)".to_string();
    };
    match kernel {
        KernelState::Running => "running (on a CPU or waiting for one)".to_string(),
        KernelState::Blocked => "stopped or blocked outside a system call".to_string(),
        KernelState::InSyscall { arg0, .. } if kernel.futex_addr().is_some() => {
            match ranges
                .named()
                .into_iter()
                .find(|(_, range)| in_range(arg0, *range))
            {
                Some((name, _)) => format!("futex wait on the GIL's {name}"),
                None => format!("futex wait at {arg0:#x} (not the GIL)"),
            }
        }
        KernelState::InSyscall { nr, .. } => usize::try_from(nr)
            .ok()
            .and_then(syscalls::Sysno::new)
            .map(|sysno| sysno.name().to_string())
            .unwrap_or_else(|| format!("system call {nr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::SYS_FUTEX;

    fn ranges() -> GilWaitRanges {
        GilWaitRanges {
            cond: Some((0x1000, 0x1030)),
            mutex: Some((0x1030, 0x1058)),
            switch_cond: Some((0x1058, 0x1088)),
            switch_mutex: None,
            cond_waiter_words: None,
        }
    }

    fn futex_on(addr: u64) -> Option<KernelState> {
        Some(KernelState::InSyscall {
            nr: SYS_FUTEX,
            arg0: addr,
            arg1: 0x189,
        })
    }

    #[test]
    fn futex_waits_name_the_gil_word_they_sleep_on() {
        let said = |k| describe_kernel_state(k, &ranges());
        assert_eq!(said(futex_on(0x1008)), "futex wait on the GIL's cond");
        assert_eq!(said(futex_on(0x1030)), "futex wait on the GIL's mutex");
        assert_eq!(
            said(futex_on(0x1060)),
            "futex wait on the GIL's switch_cond"
        );
        assert_eq!(said(futex_on(0x2000)), "futex wait at 0x2000 (not the GIL)");
    }

    #[test]
    fn other_states_are_words_too() {
        let said = |k| describe_kernel_state(k, &ranges());
        let in_call = |nr| {
            Some(KernelState::InSyscall {
                nr,
                arg0: 0,
                arg1: 0,
            })
        };
        assert_eq!(said(in_call(libc::SYS_read)), "read");
        assert_eq!(said(in_call(libc::SYS_epoll_pwait)), "epoll_pwait");
        assert_eq!(said(in_call(100_000)), "system call 100000");
        assert_eq!(
            said(Some(KernelState::Running)),
            "running (on a CPU or waiting for one)"
        );
        assert!(said(Some(KernelState::Blocked)).contains("outside a system call"));
        assert!(said(None).starts_with("unreadable"));
    }
}
