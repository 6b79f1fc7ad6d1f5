//! Naming the target's threads as the sampler finds them: the OS name (`comm`) at once, the Python
//! name (`threading.Thread.name`) where it can be read, and each new name passed on at the next tick
//! (`Finding::ThreadNames`), so that a trace cut short (gilsample killed: SIGKILL, the OOM killer)
//! still names the threads its slices are on. The end reads every name again (threads renamed since).

use std::collections::BTreeMap;

use crate::infer::findings::Finding;
use crate::python::names::{NameStats, ThreadNamer};
use crate::python::runtime::ThreadRef;
use crate::python::target::Target;

pub(super) struct ThreadNaming {
    namer: ThreadNamer,
    /// Threads named or renamed since the names were last passed on.
    unsent: Vec<u32>,
}

impl ThreadNaming {
    pub(super) fn new(target: &Target) -> ThreadNaming {
        ThreadNaming {
            namer: ThreadNamer::new(target.object_reader()),
            unsent: Vec::new(),
        }
    }

    /// A thread the walk found, whose /proc files opened: named by its OS name until its Python
    /// name is read.
    pub(super) fn found(&mut self, pid: u32, tid: u32, names: &mut BTreeMap<u32, String>) {
        if let std::collections::btree_map::Entry::Vacant(entry) = names.entry(tid) {
            entry.insert(os_name(pid, tid));
            self.unsent.push(tid);
        }
    }

    /// After a walk: the Python names of the threads of `refs` not named yet.
    pub(super) fn name_new(
        &mut self,
        target: &Target,
        refs: &[ThreadRef],
        names: &mut BTreeMap<u32, String>,
    ) {
        let named = self.namer.name_new_threads(
            &target.memory,
            &target.layout,
            target.runtime,
            refs,
            names,
        );
        self.unsent.extend(named);
    }

    /// The names given since the last call, for the trace to write at once; `None` when there are
    /// none (nearly every tick).
    pub(super) fn take_unsent(
        &mut self,
        t_ns: u64,
        names: &BTreeMap<u32, String>,
    ) -> Option<Finding> {
        if self.unsent.is_empty() {
            return None;
        }
        self.unsent.sort_unstable();
        self.unsent.dedup();
        let names = self
            .unsent
            .drain(..)
            .filter_map(|tid| Some((tid, names.get(&tid)?.clone())))
            .collect();
        Some(Finding::ThreadNames { t_ns, names })
    }

    /// At the end: every thread's Python name read again (a thread may have been renamed), and what
    /// reading names cost.
    pub(super) fn rename_all(
        &mut self,
        target: &Target,
        refs: &[ThreadRef],
        names: &mut BTreeMap<u32, String>,
    ) -> NameStats {
        self.namer
            .name_threads(&target.memory, &target.layout, target.runtime, refs, names);
        self.namer.stats
    }
}

/// The OS thread name (`comm`), or the main thread's label.
fn os_name(pid: u32, tid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    if tid == pid {
        format!("MainThread ({comm})")
    } else {
        comm.to_string()
    }
}
