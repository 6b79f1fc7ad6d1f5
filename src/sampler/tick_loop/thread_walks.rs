//! When and how a sampler walks its target's thread list: the walk itself (`refresh`), when one is
//! due at a tick (`walk_if_due`), and what follows one (`walked`). A child of tick_loop.rs: the same
//! `Sampler`.

use std::sync::atomic::Ordering;

use super::Sampler;
use crate::process::kernel::ThreadFiles;
use crate::process::memory::ReadError;
use crate::python::gil_span::GilReading;
use crate::python::runtime::WalkError;
use crate::sampler::config::LiveCounters;
use crate::sampler::pace::Refresh;
use crate::sampler::report::EndReason;

impl Sampler<'_> {
    /// Re-walks the thread list when it is due: when the GIL's holder is not a known thread, when
    /// the list's head moved, at the repeat walks while two thread states name one thread
    /// (`pace.unbound`), and for threads that exited elsewhere in the list (`Pace::refresh_check`:
    /// when the thread count moved, looked at every `refresh_ns`). Errors as `read_gil`'s.
    pub(super) fn walk_if_due(
        &mut self,
        t0: u64,
        reading: &GilReading,
        live: &LiveCounters,
    ) -> Result<(), Option<EndReason>> {
        let config = self.config;
        let word = reading.word;
        let holder_unknown =
            word.locked && self.table.index_of_thread_state(word.last_holder).is_none();
        let pace = &mut self.pace;
        if !holder_unknown && !pace.walk_now && !pace.unbound.due(t0) {
            let count = &self.thread_count;
            match pace.refresh_check(t0, config.refresh_ns, || count.moved()) {
                Refresh::NotDue => return Ok(()),
                Refresh::Spared => {
                    self.report.thread_walks_spared += 1;
                    // Names not found yet are looked for again, as a walk would have.
                    let names = &mut self.report.thread_names;
                    self.naming.name_new(self.target, &self.refs, names);
                    return Ok(());
                }
                Refresh::Walk => {}
            }
        }
        pace.last_walk = t0;
        pace.walk_now = false;
        match self.refresh() {
            Ok(unbound) => {
                self.walked(t0, unbound, live);
                Ok(())
            }
            Err(WalkError::Read(ReadError::Gone)) => Err(Some(EndReason::TargetExited)),
            Err(_) => {
                self.report.faulted_samples += 1;
                Err(self.after_fault(t0))
            }
        }
    }

    /// After a walk of the thread list at `at` (`unbound`: two thread states named one thread):
    /// when the next walk is due, and the thread count the session shows.
    pub(super) fn walked(&mut self, at: u64, unbound: bool, live: &LiveCounters) {
        let config = self.config;
        self.pace.last_walk = at;
        self.pace
            .unbound
            .after_walk(at, unbound, config.period_ns, config.refresh_ns);
        live.threads
            .store(self.table.len() as u64, Ordering::Relaxed);
    }

    /// Re-walks the thread list: forgets threads that are gone (the engine closes them at the next
    /// sample, which lacks them), opens the /proc files of new ones. `Ok(true)`: two thread states
    /// named the same thread. Before 3.11 a new thread's state carries its creator's `pthread_t`
    /// until the new thread starts and sets its own, and the head of the list does not move when it
    /// does: without another walk the new thread would stay unseen (or its creator's state be taken
    /// for it) until the next `refresh_ns`.
    pub(super) fn refresh(&mut self) -> Result<bool, WalkError> {
        let target = self.target;
        // Before the walk: a thread that starts or exits during it moves the count from this.
        self.thread_count.note();
        target.walk_threads(&mut self.walker, &mut self.refs)?;
        // The thread states hold ids of the target's PID namespace; /proc and the trace use ours.
        match self.tid_map.as_mut() {
            Some(map) if map.translates() => self.refs.retain_mut(|r| match map.to_ours(r.tid) {
                Some(ours) => {
                    r.tid = ours;
                    true
                }
                None => false,
            }),
            Some(_) => {}
            None => self.refs.clear(),
        }
        let (refs, naming) = (&self.refs, &mut self.naming);
        let names = &mut self.report.thread_names;
        let unbound = self.table.follow(refs, |r| {
            let files = ThreadFiles::open(target.pid, r.tid).ok()?;
            naming.found(target.pid, r.tid, names);
            Some(files)
        });
        naming.name_new(target, refs, names);
        if let Some(watch) = self.stacks.as_mut() {
            watch.retain(|tid| self.table.index_of(tid).is_some());
        }
        self.report.max_threads = self.report.max_threads.max(self.table.len());
        self.report.thread_walks += 1;
        Ok(unbound)
    }
}
